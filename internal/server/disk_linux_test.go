package server_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/server"
)

// TestTenantDiskCeiling: with a real local provider, a tenant that asks
// for more disk than --max-disk is refused (invalid_argument naming it),
// and one that asks for none gets --default-disk: its 100 MiB write into
// a 32 MiB default ends in ENOSPC, and the sandbox runs the next command.
func TestTenantDiskCeiling(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a local sandbox's disk bound needs root (a loop-mounted filesystem)")
	}
	ts := startServer(t, onLocalProvider(t), func(c *serverConfig) {
		c.Limits = server.Limits{MaxDisk: 64 << 20, DefaultDisk: 32 << 20}
	})
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	if sb, err := srv.Create(ctx, runbox.SandboxSpec{Disk: 128 << 20}); !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "--max-disk") {
		t.Fatalf("128 MiB under a 64 MiB ceiling: want invalid_argument naming --max-disk, got %v %v", sb, err)
	}
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(ctx, sb, true)
	res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "dd if=/dev/zero of=/var/tmp/fill bs=1M count=100 2>&1; echo dd=$?"})
	if err != nil {
		t.Fatal(err)
	}
	if out := string(res.Stdout); !strings.Contains(out, "No space left") || strings.Contains(out, "dd=0") {
		t.Errorf("100 MiB into the 32 MiB default disk:\n%s", out)
	}
	res, _, err = srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "rm /var/tmp/fill && echo ok"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Errorf("the next command: %+v %v", res, err)
	}
}
