package docker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// TestPauseFreezesCgroupBehindEngine: on a local Docker engine (as root)
// Pause freezes the container's cgroup itself, so the engine still says
// running; the provider stays consistent: a busy loop uses no CPU while
// paused (counted from /proc) and continues after Resume; Get says paused;
// an exec is refused with ErrSandboxPaused on both streams, never a hang;
// Remove of a sandbox paused this way thaws it and leaves no process.
// (Before, Pause went through the engine: State.Paused was true.)
func TestPauseFreezesCgroupBehindEngine(t *testing.T) {
	needEngine(t)
	cli := engine(t)
	if isPodman(t, cli) || os.Geteuid() != 0 {
		t.Skip("the direct freezer is for a local Docker engine, as root (Podman and the rest go through the engine)")
	}
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := create(t, p, runbox.SandboxSpec{})
	c := dial(t, p, sb)
	n := time.Now().UnixNano()
	marker := fmt.Sprintf("busy%d", n)
	// A busy loop in a process of its own, named by marker (its $0), which
	// the command line that starts it does not spell out.
	if _, err := c.Start(ctx, fmt.Sprintf("m=busy; sh -c 'while :; do :; done' \"${m}%d\"", n)); err != nil {
		t.Fatal(err)
	}
	pid := waitPid(t, cli, sb, marker)

	for round := range 3 { // paused and resumed again, each time consistent
		for range 2 { // a second pause is not an error
			if err := p.Pause(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		ir, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ir.Container.State.Paused || !ir.Container.State.Running {
			t.Fatalf("round %d: the engine says %+v; want running (the cgroup frozen behind its back)", round, ir.Container.State)
		}
		got, err := p.Get(ctx, sb.ID)
		if err != nil || got.Detail["paused"] != "true" || got.Detail["state"] != "paused" {
			t.Errorf("round %d: Get of a paused sandbox: %v, %v; want paused", round, got.Detail, err)
		}
		ls, err := p.List(ctx) // other tests' sandboxes among them
		listed := false
		for _, l := range ls {
			if l.ID == sb.ID {
				listed = true
				if l.Detail["paused"] != "true" {
					t.Errorf("round %d: List says %v; want the sandbox paused", round, l.Detail)
				}
			}
		}
		if err != nil || !listed {
			t.Errorf("round %d: List: %v, %v; want the sandbox in it", round, ls, err)
		}
		before := providertest.CPUTicks(t, pid)
		time.Sleep(300 * time.Millisecond)
		if after := providertest.CPUTicks(t, pid); after != before {
			t.Errorf("round %d: the busy loop used %d ticks of CPU while paused", round, after-before)
		}
		for _, force := range []bool{false, true} {
			q := &docker.Provider{Home: p.Home, Runboxd: p.Runboxd, ForceExecStream: force}
			ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := rbclient.New(q.Dialer(sb), rbclient.WithSandboxName(sb.ID)).Exec(ectx, "true")
			ecancel()
			q.Close()
			if !errors.Is(err, runbox.ErrSandboxPaused) {
				t.Errorf("round %d: exec on a paused sandbox (exec stream %v): %v, want ErrSandboxPaused", round, force, err)
			}
		}
		if round == 2 {
			break // removed while paused, below
		}
		if err := p.Resume(ctx, sb); err != nil {
			t.Fatal(err)
		}
		before = providertest.CPUTicks(t, pid)
		deadline := time.Now().Add(30 * time.Second)
		for providertest.CPUTicks(t, pid) == before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if providertest.CPUTicks(t, pid) == before {
			t.Fatalf("round %d: the busy loop did not run again after Resume", round)
		}
		wantStdout(t, run(t, dial(t, p, sb), "echo back"), "back\n")
	}

	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if err := p.Remove(rctx, sb, false); err != nil {
		t.Fatalf("remove of a paused sandbox: %v", err)
	}
	if _, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the container is still there after remove: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("the busy loop (pid %d) survived the removal", pid)
	}
}

// waitPid returns the host pid of the container's process whose command
// line holds marker.
func waitPid(t *testing.T, cli *moby.Client, sb runbox.Sandbox, marker string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, pr := range top(t, cli, sb.Detail["container"]) {
			if strings.Contains(pr.args, marker) {
				return pr.pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no process %s in the container", marker)
	return 0
}
