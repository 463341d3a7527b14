package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/docker"
)

// TestPauseSnapshotFork: on both streams, docker's pause freezes the
// container (runboxd with it): Get says paused, a new exec is refused with
// ErrSandboxPaused at once (never a hang), an exec running across the pause
// keeps its full timeout and its output; a snapshot (a committed image)
// gives sandboxes (up --from) with the parent's files, each writing on its
// own; the snapshot cannot be removed while a sandbox uses it.
func TestPauseSnapshotFork(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sb := create(t, p, runbox.SandboxSpec{})
		c := dial(t, p, sb)
		wantStdout(t, run(t, c, "echo parent > /etc/state && echo ok"), "ok\n")
		proc, err := c.Start(ctx, "sleep 1; echo survived", rbclient.WithTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // a second pause is not an error
			if err := p.Pause(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.Get(ctx, sb.ID)
		if err != nil || !got.Alive || got.Detail["paused"] != "true" {
			t.Errorf("Get of a paused sandbox: %+v, %v; want alive and paused", got, err)
		}
		c2 := dial(t, p, got)
		ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = c2.Exec(ectx, "true")
		ecancel()
		if !errors.Is(err, runbox.ErrSandboxPaused) {
			t.Errorf("exec on a paused sandbox: %v, want ErrSandboxPaused", err)
		}
		time.Sleep(3 * time.Second) // past the running exec's timeout
		for range 2 {
			if err := p.Resume(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		res, err := proc.Wait(ctx)
		if err != nil || res.TimedOut || string(res.Stdout) != "survived\n" {
			t.Errorf("exec across the pause: %+v (stdout %q), %v; want it to finish with its output", res, res.Stdout, err)
		}

		name := "t" + strings.ToLower(sb.ID)
		snap, err := p.Snapshot(ctx, sb, name, runbox.SnapshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Registered first, so it runs after the forks' removal.
		t.Cleanup(func() {
			if err := p.RemoveSnapshot(context.Background(), snap.Name); err != nil {
				t.Errorf("remove snapshot: %v", err)
			}
		})
		if snap.Sandbox != sb.ID || snap.Detail["image"] != docker.SnapshotRepo+"/"+name {
			t.Errorf("snapshot %+v", snap)
		}
		var forks []*rbclient.Client
		for range 2 {
			fsb, err := p.Create(ctx, runbox.SandboxSpec{FromSnapshot: name})
			if err != nil {
				t.Fatalf("create from the snapshot: %v", err)
			}
			t.Cleanup(func() { _ = p.Remove(context.Background(), fsb, true) })
			forks = append(forks, dial(t, p, fsb))
		}
		for i, fc := range forks {
			who := string(rune('a' + i))
			wantStdout(t, run(t, fc, "cat /etc/state; echo "+who+" > /etc/who"), "parent\n")
		}
		for i, fc := range forks {
			wantStdout(t, run(t, fc, "cat /etc/who"), string(rune('a'+i))+"\n")
		}
		if res := run(t, c, "cat /etc/who"); res.ExitCode == 0 {
			t.Errorf("the parent sees a fork's write: %q", res.Stdout)
		}
		if err := p.RemoveSnapshot(ctx, name); !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("removing a snapshot in use: %v, want a refusal", err)
		}
	})
}

// TestSnapshotHoldsOnlyItsChanges: on a local engine a snapshot's own
// layer is the sandbox's changes (1 MiB here), not runboxd's 15 MiB beside
// them: runboxd is bind-mounted read-only, never written into the
// container's filesystem. (Before the bind mount the layer was 16.9 MiB.)
func TestSnapshotHoldsOnlyItsChanges(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	cli := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb := create(t, p, runbox.SandboxSpec{})
	c := dial(t, p, sb)
	const changes = 1 << 20
	wantStdout(t, run(t, c, "head -c 1048576 /dev/urandom > /etc/blob && echo ok"), "ok\n")
	if res := run(t, c, "echo x > /.runbox/runboxd"); res.ExitCode == 0 {
		t.Errorf("a command wrote runboxd's binary")
	}
	name := "t" + strings.ToLower(sb.ID) + "-size"
	snap, err := p.Snapshot(ctx, sb, name, runbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.RemoveSnapshot(context.Background(), snap.Name) })
	base, err := cli.ImageInspect(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	img, err := cli.ImageInspect(ctx, snap.Detail["image"])
	if err != nil {
		t.Fatal(err)
	}
	layer := img.Size - base.Size
	t.Logf("snapshot layer %d bytes for %d bytes of changes", layer, changes)
	if layer < changes || layer > changes+256<<10 {
		t.Errorf("the snapshot's layer is %d bytes for %d bytes of changes; want the changes and little more", layer, changes)
	}
	// A sandbox made from it still starts (its runboxd is bound again).
	fsb, err := p.Create(ctx, runbox.SandboxSpec{FromSnapshot: name})
	if err != nil {
		t.Fatalf("create from the snapshot: %v", err)
	}
	t.Cleanup(func() { _ = p.Remove(context.Background(), fsb, true) })
	wantStdout(t, run(t, dial(t, p, fsb), "wc -c < /etc/blob"), "1048576\n")
}
