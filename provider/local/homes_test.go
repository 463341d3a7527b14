package local_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
)

// TestWorkdirHoldingAnotherHomeRefused: a workdir that contains, or lies
// inside, another runbox home (a host sandbox's, made at a fresh random
// path) is refused with ErrInvalidSpec naming it. Before, only the
// sandbox's own home was masked: the sandbox read the other home's secret
// through its workspace and could drive that runboxd as host root.
func TestWorkdirHoldingAnotherHomeRefused(t *testing.T) {
	needLocal(t)
	top := filepath.Join("/var/tmp", fmt.Sprintf("rbw%08x", rand.Uint32()))
	t.Cleanup(func() { os.RemoveAll(top) })
	other := filepath.Join(top, "x", "h")
	hp := &host.Provider{Home: other, Runboxd: os.Getenv("RUNBOX_RUNBOXD")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim, err := hp.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Remove(context.Background(), victim, true) })
	secret := filepath.Join(filepath.Dir(victim.Detail["socket"]), "secret")
	want, err := os.ReadFile(secret)
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(t)
	for _, wd := range []string{top, filepath.Join(top, "x"), other, filepath.Join(other, "sandboxes")} {
		sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: wd})
		if err == nil {
			// What the old code allowed: read the other home's secret.
			c := client.New(p.Dialer(sb))
			rel, _ := filepath.Rel(wd, secret)
			res, _ := c.Exec(ctx, "od -An -tx1 "+filepath.Join(local.WorkspacePath, rel)+" | tr -d ' \\n'")
			c.Close()
			p.Remove(ctx, sb, true)
			harm := ""
			if strings.Contains(string(res.Stdout), fmt.Sprintf("%x", want)) {
				harm = ", and the sandbox read that home's secret"
			}
			t.Errorf("workdir %s (holding or inside the runbox home %s) was accepted%s", wd, other, harm)
			continue
		}
		if !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), other) {
			t.Errorf("workdir %s: %v, want ErrInvalidSpec naming %s", wd, err, other)
		}
	}
}
