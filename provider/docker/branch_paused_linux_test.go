package docker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// TestSnapshotOfAPausedSandboxStaysPaused: on both streams (socket: the
// provider freezes the container's cgroup itself, as root; exec: the
// engine pauses it), a snapshot and a fork (a sandbox from the snapshot)
// of a sandbox its user paused leave it paused: its busy loop uses no CPU
// (counted from /proc) across both until Resume, Get says paused (and the
// engine's inspect, when the engine paused it), runbox ls says paused and
// runbox inspect's detail and daemon say so; Resume lets the loop run and
// ls says up. A snapshot of a running sandbox leaves it running. (Before,
// Snapshot resumed the sandbox after its commit.)
func TestSnapshotOfAPausedSandboxStaysPaused(t *testing.T) {
	needEngine(t)
	cli := engine(t)
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			p := newProvider(t, s.force)
			t.Setenv("RUNBOX_HOME", p.Home)
			t.Setenv("RUNBOX_RUNBOXD", bin)
			t.Setenv("RUNBOX_PROVIDER", "docker")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb := create(t, p, runbox.SandboxSpec{})
			c := dial(t, p, sb)
			marker := fmt.Sprintf("busy%d", time.Now().UnixNano())
			if _, err := c.Start(ctx, "m="+marker[:4]+"; sh -c 'while :; do :; done' \"${m}"+marker[4:]+"\""); err != nil {
				t.Fatal(err)
			}
			pid := waitPid(t, cli, sb, marker)

			if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "up" {
				t.Errorf("ls of a running sandbox says %q, want up", st)
			}
			running := "t" + strings.ToLower(sb.ID) + "-running"
			if _, err := p.Snapshot(ctx, sb, running, runbox.SnapshotOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.RemoveSnapshot(context.Background(), running) })
			if got, err := p.Get(ctx, sb.ID); err != nil || got.Detail["paused"] != "" {
				t.Errorf("Get after a snapshot of a running sandbox: %v, %v; want it running", got.Detail, err)
			}
			c0 := providertest.CPUTicks(t, pid)
			deadline := time.Now().Add(30 * time.Second)
			for providertest.CPUTicks(t, pid) == c0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if providertest.CPUTicks(t, pid) == c0 {
				t.Error("the busy loop does not run after a snapshot of the running sandbox")
			}

			if err := p.Pause(ctx, sb); err != nil {
				t.Fatal(err)
			}
			frozen := providertest.CPUTicks(t, pid)
			name := "t" + strings.ToLower(sb.ID) + "-paused"
			if _, err := p.Snapshot(ctx, sb, name, runbox.SnapshotOptions{}); err != nil {
				t.Fatalf("snapshot of a paused sandbox: %v", err)
			}
			// Registered first, so it runs after the fork's removal.
			t.Cleanup(func() { _ = p.RemoveSnapshot(context.Background(), name) })
			got, err := p.Get(ctx, sb.ID)
			if err != nil || !got.Alive || got.Detail["paused"] != "true" {
				t.Errorf("Get after the snapshot: %+v, %v; want alive and paused", got, err)
			}
			if s.force {
				ir, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{})
				if err != nil || !ir.Container.State.Paused {
					t.Errorf("the engine's inspect after the snapshot: %+v, %v; want paused", ir.Container.State, err)
				}
			}
			ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = dial(t, p, sb).Exec(ectx, "true")
			ecancel()
			if !errors.Is(err, runbox.ErrSandboxPaused) {
				t.Errorf("exec after the snapshot: %v, want ErrSandboxPaused", err)
			}
			fork := createFrom(t, p, runbox.SandboxSpec{FromSnapshot: name})
			wantStdout(t, run(t, dial(t, p, fork), "echo fork-runs"), "fork-runs\n")
			if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "paused" {
				t.Errorf("ls of the paused sandbox after snapshot and fork says %q, want paused", st)
			}
			if st := providertest.LSStatus(t, cliOf(t), fork.ID); st != "up" {
				t.Errorf("ls of the fork says %q, want up", st)
			}
			if detail, daemon := providertest.InspectPaused(t, cliOf(t), sb.ID); detail != "true" || !daemon {
				t.Errorf("inspect of the paused sandbox: detail.paused %q, daemon.paused %v; want both paused", detail, daemon)
			}
			// Long enough for a loop that runs to use CPU; it must not.
			time.Sleep(300 * time.Millisecond)
			if now := providertest.CPUTicks(t, pid); now != frozen {
				t.Errorf("the busy loop used %d ticks of CPU across the snapshot and the fork of its paused sandbox", now-frozen)
			}

			if err := p.Resume(ctx, sb); err != nil {
				t.Fatal(err)
			}
			deadline = time.Now().Add(30 * time.Second)
			for providertest.CPUTicks(t, pid) == frozen && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if providertest.CPUTicks(t, pid) == frozen {
				t.Error("the busy loop did not run again after Resume")
			}
			if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "up" {
				t.Errorf("ls after resume says %q, want up", st)
			}
			if detail, daemon := providertest.InspectPaused(t, cliOf(t), sb.ID); detail != "" || daemon {
				t.Errorf("inspect after resume: detail.paused %q, daemon.paused %v; want neither", detail, daemon)
			}
		})
	}
}

// createFrom makes a sandbox from spec.FromSnapshot (no image), removed
// (with force) when the test ends.
func createFrom(t testing.TB, p *docker.Provider, spec runbox.SandboxSpec) runbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create from snapshot %s: %v", spec.FromSnapshot, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("remove %s: %v", sb.ID, err)
		}
	})
	return sb
}
