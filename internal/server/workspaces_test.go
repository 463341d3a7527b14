package server_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runbox/runbox"
)

// TestWorkspacesPrivate: the workspace root, each sandbox's workspace and
// the home are 0700 — made so, and tightened at start when an operator's
// older ones were wider — so a stranger's reach (what a local sandbox
// has) cannot read tenant A's workspace from tenant B's side, by the host
// path or through /proc.
func TestWorkspacesPrivate(t *testing.T) {
	ws := t.TempDir() + "/ws"
	if err := os.MkdirAll(filepath.Join(ws, "sb-old"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(ws, 0o755)
	ts := startServer(t, func(c *serverConfig) { c.WorkspaceDir = ws })
	ctx := ctxT(t)
	a, b := ts.tenant(t, "a"), ts.tenant(t, "b")
	sa, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	sbB, err := b.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := a.Run(ctx, sa.ID, runbox.ExecSpec{Command: "echo tenant-a-secret > secret.txt; pwd"})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("plant: %v %+v", err, r)
	}
	wsA := strings.TrimSpace(string(r.Stdout))
	for _, dir := range []string{ws, filepath.Join(ws, "sb-old"), wsA, filepath.Join(ws, sbB.ID)} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s is %v, want 0700", dir, st.Mode().Perm())
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	// A stranger (nobody, no groups), as a local sandbox's reach is: every
	// path to tenant A's secret fails.
	for _, path := range []string{
		filepath.Join(wsA, "secret.txt"),
		filepath.Join(ws, sbB.ID, "..", sa.ID, "secret.txt"),
		"/proc/1/root" + filepath.Join(wsA, "secret.txt"),
	} {
		cmd := exec.Command("cat", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		if out, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(out), "tenant-a-secret") {
			t.Errorf("a stranger read %s: %q", path, out)
		}
	}
}
