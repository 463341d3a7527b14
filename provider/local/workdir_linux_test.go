package local_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

func randomName(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestWorkdirResolvedNotCleaned: a workdir is opened component by
// component without following links. A workdir through a link planted at a
// random path (the serve attack: a sandbox writes `ln -s / escape` into
// its workspace, then a second sandbox names workspace/escape) is refused,
// and a missing workdir is refused, not created on the host. Before, the
// link was followed (the second sandbox's /workspace was the host's /) and
// the missing directory was made.
func TestWorkdirResolvedNotCleaned(t *testing.T) {
	p := newProvider(t)
	base := t.TempDir()
	target := filepath.Join(base, "target-"+randomName(t))
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(ws, "escape-"+randomName(t))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "missing-"+randomName(t), "deeper")
	for _, wd := range []string{link, filepath.Join(link, "."), missing} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: wd})
		cancel()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			p.Remove(ctx, sb, true)
			cancel()
			t.Errorf("workdir %s: created, want refused", wd)
			continue
		}
		if !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "workdir") {
			t.Errorf("workdir %s: %v, want runbox.ErrInvalidSpec naming the workdir", wd, err)
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the missing workdir's parent %s was created on the host (%v)", filepath.Dir(missing), err)
	}
}
