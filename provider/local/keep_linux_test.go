package local_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/runbox/runbox"
)

// TestKillAllAndBinaryFromInside is issue 27's "keep them so" list for a
// default local sandbox, run for real: `kill -9 -1` and a SIGKILL to every
// host pid it could name reach neither a fresh host process nor a sibling
// sandbox of the same home (it keeps serving, and its workspace, a fresh
// 0700 directory at a random path, stays unreadable from the first); and
// runboxd's binary, copied to a fresh random path for this test, cannot be
// changed from inside (by its path, or through /proc/1/exe).
func TestKillAllAndBinaryFromInside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it plants root-owned targets at random host paths; run the tests as root (CI does)")
	}
	p := newProvider(t)

	// runboxd's binary at a fresh random path, root's, 0755.
	binDir, err := os.MkdirTemp("/var/tmp", "rbbin.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	if err := os.Chmod(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "runboxd-"+strconv.Itoa(rand.IntN(1e9)))
	copyFile(t, p.Runboxd, bin, 0o755)
	p.Runboxd = bin
	before := sha(t, bin)

	// A host process the sandbox must not reach.
	host := osexec.Command("sleep", fmt.Sprintf("%d.%03d", 600+rand.IntN(100), rand.IntN(1000)))
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	hostDone := make(chan struct{})
	go func() { host.Wait(); close(hostDone) }()
	t.Cleanup(func() { host.Process.Kill(); <-hostDone })

	// A sibling sandbox of the same home, its workspace a fresh 0700
	// directory at a random path holding a 0600 secret.
	wsB, err := os.MkdirTemp("/var/tmp", "rbws.")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(wsB) })
	secret := "sibling-" + strconv.Itoa(rand.IntN(1e9))
	secretPath := filepath.Join(wsB, "s-"+strconv.Itoa(rand.IntN(1e9)))
	if err := os.WriteFile(secretPath, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	_, cB := create(t, p, runbox.SandboxSpec{Workdir: wsB})
	_, cA := create(t, p, runbox.SandboxSpec{})

	res := exec(t, cA, fmt.Sprintf(`cat %s; cat /proc/1/root%s; ls %s`, secretPath, secretPath, wsB))
	if bytes.Contains(res.Stdout, []byte(secret)) || bytes.Contains(res.Stdout, []byte(filepath.Base(secretPath))) {
		t.Errorf("a sandbox read its sibling's workspace %s: %q", wsB, res.Stdout)
	}

	// Every way at the binary: by its path, through /proc/1/exe, and by
	// replacing it.
	exec(t, cA, fmt.Sprintf(`printf x >> %[1]s; cat /bin/true > %[1]s; cp /bin/true /proc/1/exe; printf x > /proc/1/exe; rm -f %[1]s; mv /bin/true %[1]s; true`, bin))
	if after := sha(t, bin); after != before {
		t.Errorf("a command changed runboxd's binary %s on the host", bin)
	}

	// kill -9 -1, then SIGKILL to the host pids of the host process and of
	// this test: in the sandbox's pid namespace they are nobody, or its own.
	exec(t, cA, fmt.Sprintf(`kill -9 -1; kill -9 %d %d 2>/dev/null; true`, host.Process.Pid, os.Getpid()))
	select {
	case <-hostDone:
		t.Errorf("a host process (pid %d) died of a sandbox's kill -9 -1", host.Process.Pid)
	default:
	}
	if got := run(t, cA, "echo still here"); got != "still here\n" {
		t.Errorf("the sandbox after its own kill -9 -1: %q", got)
	}
	if got := run(t, cB, "cat /workspace/"+filepath.Base(secretPath)); got != secret {
		t.Errorf("the sibling sandbox after kill -9 -1 next door: %q, want its own workspace's secret", got)
	}
}

// copyFile copies src to a new file dst of mode perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// sha is the SHA-256 of the file at path, in hex.
func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
