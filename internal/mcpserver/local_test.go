package mcpserver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/provider/local"
)

// The default provider, local: commands run in the jail with the
// workspace at /workspace, the file tools reach what its commands reach
// (paths as the sandbox sees them), a timeout leaves nothing on the host, and the
// session's sandbox is gone when the session ends.
func TestLocalProvider(t *testing.T) {
	home, workdir := testHome(t)
	t.Cleanup(func() {
		p := &local.Provider{Home: home}
		sbs, _ := p.List(context.Background())
		for _, sb := range sbs {
			t.Errorf("local sandbox %s left behind", sb.ID)
			_ = p.Remove(context.Background(), sb, true)
		}
	})
	s := startStdioHome(t, home, workdir, "--provider", "local")
	res := s.call(t, "exec", map[string]any{"command": "pwd"})
	if res.IsError {
		missing := mcptest.ResultText(res)
		if os.Getenv("RUNBOX_REQUIRE_LOCAL") == "1" {
			t.Fatalf("RUNBOX_REQUIRE_LOCAL=1 but: %s", missing)
		}
		t.Skipf("no local sandbox here: %s (set RUNBOX_REQUIRE_LOCAL=1 to make this a failure)", missing)
	}
	if r := decode[execResult](t, res); r.Stdout != "/workspace\n" {
		t.Fatalf("pwd in a local sandbox: %+v", r)
	}
	ok[struct{}](t, s.cs, "file_write", map[string]any{"path": "/workspace/made.txt", "content": "from mcp\n"})
	if b, err := os.ReadFile(filepath.Join(workdir, "made.txt")); err != nil || string(b) != "from mcp\n" {
		t.Errorf("made.txt on the host: %q, %v", b, err)
	}
	if r := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": "made.txt"}); r.Path != "/workspace/made.txt" || r.Content != "from mcp\n" {
		t.Errorf("file_read: %+v", r)
	}
	// Outside /workspace the file tools see what a command sees: the
	// sandbox's /etc/hostname, and not a root-only host file (planted at a
	// fresh random path), which commands cannot read either.
	cat := ok[execResult](t, s.cs, "exec", map[string]any{"command": "cat /etc/hostname"})
	if r := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": "/etc/hostname"}); r.Content != cat.Stdout {
		t.Errorf("file_read /etc/hostname: %q, cat printed %q", r.Content, cat.Stdout)
	}
	dir, err := os.MkdirTemp("/", "rbm-secret-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "cat " + secret}); r.ExitCode == 0 {
		t.Fatalf("a command read the root-only host file: %+v", r)
	}
	if msg := failing(t, s.cs, "file_read", map[string]any{"path": secret}); strings.Contains(msg, "host secret") {
		t.Errorf("file_read of a root-only host file: %q", msg)
	}
	// A write lands in the sandbox's overlay, if anywhere, never on the
	// host.
	s.call(t, "file_write", map[string]any{"path": secret, "content": "pwned\n"})
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret\n" {
		t.Errorf("the root-only host file after file_write: %q, %v", b, err)
	}
	m := marker()
	r := ok[execResult](t, s.cs, "exec", map[string]any{"command": fmt.Sprintf("sleep %s & sleep %s", m, m), "timeout_seconds": 1})
	if !r.TimedOut {
		t.Errorf("timed-out exec: %+v", r)
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes of the timed-out exec survive on the host", n)
	}
	s.close(t)
	if sbs, err := (&local.Provider{Home: home}).List(context.Background()); err != nil || len(sbs) != 0 {
		t.Errorf("after the session: %v, %v", sbs, err)
	}
}
