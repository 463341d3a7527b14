package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// TestRunboxHomeInWorkspace: a workspace that holds the runbox home (a
// sandbox made from ~ with the default ~/.runbox) shows the home empty, so
// no socket, secret or record of any sandbox is reachable through it; a
// workspace inside the home is refused.
func TestRunboxHomeInWorkspace(t *testing.T) {
	needEngine(t)
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	ws, err := os.MkdirTemp("", "rbxw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	p := &docker.Provider{Home: filepath.Join(ws, "h"), Runboxd: bin}
	t.Cleanup(func() { p.Close() })
	other := create(t, p, runbox.SandboxSpec{Workdir: t.TempDir()}) // its socket and state live in the home
	sb := create(t, p, runbox.SandboxSpec{Workdir: ws})
	c := dial(t, p, sb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, "ls -A /workspace/h | wc -l; find /workspace -type s -o -name secret -o -name '*.json'")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "0" {
		t.Errorf("the runbox home in the workspace (holding sandbox %s): %q, want it empty", other.ID, got)
	}
	for _, wd := range []string{p.Home, filepath.Join(p.Home, "docker")} {
		_, err := p.Create(ctx, runbox.SandboxSpec{Image: testImage, Workdir: wd})
		if !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "runbox home") {
			t.Errorf("create with workdir %s: %v, want a refusal naming the runbox home", wd, err)
		}
	}
}
