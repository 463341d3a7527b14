package ssh_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// The sandbox's secret never reaches the host: not in runboxd's command
// line or environment, not in any file of its state directory; and a
// command on the host, running as the same user and able to reach a
// sibling sandbox's socket, is refused by it (it holds no secret).
func TestSecretStaysHereAndSocketRefusesCommands(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 to play the attacker with (apt-get install python3)")
	}
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	a := create(t, p, runbox.SandboxSpec{})
	b := create(t, p, runbox.SandboxSpec{})
	secret, err := os.ReadFile(filepath.Join(b.Detail["dir"], "secret"))
	if err != nil {
		t.Fatal(err)
	}
	needles := [][]byte{secret, []byte(hex.EncodeToString(secret))}
	for _, f := range []string{"cmdline", "environ"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%s/%s", b.Detail["pid"], f))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range needles {
			if bytes.Contains(data, n) {
				t.Errorf("runboxd's %s holds the secret", f)
			}
		}
	}
	filepath.WalkDir(b.Detail["remote_dir"], func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return nil
		}
		data, _ := os.ReadFile(path)
		for _, n := range needles {
			if bytes.Contains(data, n) {
				t.Errorf("%s on the host holds the secret", path)
			}
		}
		return nil
	})

	attack := fmt.Sprintf(`python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
s.settimeout(30)
print(s.recv(200).decode(errors="replace"))
' %s`, b.Detail["socket"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := newClient(t, p, a).Exec(ctx, attack)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a command in %s against %s's socket: exit %d, %q %q", a.ID, b.ID, res.ExitCode, res.Stdout, res.Stderr)
	if !res.OK() || !strings.HasPrefix(string(res.Stdout), "RUNBOXD-AUTH REFUSED") {
		t.Errorf("a command reaching a sibling's socket was not refused: %q %q", res.Stdout, res.Stderr)
	}
}
