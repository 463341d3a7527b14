package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/docker"
)

// TestDiskBound: a disk bound goes to the engine as the storage driver's
// size option. An engine whose driver takes it makes a container whose
// writable layer ends in ENOSPC past the bound; one whose driver cannot
// (Docker's overlay2 on ext4, as on most hosts) refuses the sandbox with
// ErrLimitUnsupported, never makes it unbounded.
func TestDiskBound(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, runbox.SandboxSpec{Image: testImage, Disk: 64 << 20})
	if err != nil {
		if !errors.Is(err, docker.ErrLimitUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("create with a disk bound: %v, want a sandbox or ErrLimitUnsupported", err)
		}
		return
	}
	t.Cleanup(func() { _ = p.Remove(context.Background(), sb, true) })
	c := client.New(p.Dialer(sb))
	defer c.Close()
	res, err := c.Exec(ctx, "dd if=/dev/zero of=/var/tmp/fill bs=1M count=200 2>&1; echo dd=$?")
	if err != nil {
		t.Fatal(err)
	}
	if out := string(res.Stdout); !strings.Contains(out, "No space left") || strings.Contains(out, "dd=0") {
		t.Errorf("200 MiB into a 64 MiB writable layer:\n%s", out)
	}
}
