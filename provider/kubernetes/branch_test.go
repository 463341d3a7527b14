package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/branching"
	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/providertest"
)

// TestBranchingOnKubernetes: a pod cannot be snapshotted, so the provider
// is no runbox.Snapshotter (branching.SnapshotterOf says
// runbox.ErrUnsupported, which matches errors.ErrUnsupported too) and a
// Create from a snapshot is refused the same way, never a pod without the
// snapshot; through the real CLI runbox snapshot, runbox fork and runbox
// up --from exit 125 with one line naming the provider, and leave the
// sandbox up. Pause is not refused: runboxd freezes the commands (a busy
// loop's CPU time in /proc stops), ls and inspect say paused, an exec
// exits 125 naming the state, and resume lets the loop run.
func TestBranchingOnKubernetes(t *testing.T) {
	needCluster(t)
	p := newProvider(t)
	if _, err := branching.SnapshotterOf(p); !errors.Is(err, runbox.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SnapshotterOf(kubernetes): %v, want ErrUnsupported", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if sb, err := p.Create(ctx, runbox.SandboxSpec{Image: testImage, FromSnapshot: "snap"}); !errors.Is(err, runbox.ErrUnsupported) {
		if err == nil {
			_ = p.Remove(ctx, sb, true)
		}
		t.Errorf("Create from a snapshot on kubernetes: %v, want ErrUnsupported", err)
	}

	c := &cliRun{t: t, bin: buildCLI(t), home: shortHome(t), extra: []string{endpoint.IdleEnv + "=5m"}}
	code, out, errs := c.run("up", "--provider", "kubernetes", "--image", testImage, "--name", "kbranch")
	if code != 0 {
		t.Fatalf("up: status %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	sb, err := p.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sock, err := endpoint.Socket(c.home, "kubernetes", id); err == nil {
			if pid := providertest.EndpointPid(t, sock); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.Remove(ctx, sb, true)
	})
	for _, args := range [][]string{{"snapshot", "kbranch"}, {"snapshot", "kbranch", "named"}, {"fork", "kbranch", "--count", "2"}} {
		code, out, errs := c.run(args...)
		want := "runbox: " + args[0] + " sandbox kbranch: provider kubernetes cannot snapshot: unsupported operation by this provider\n"
		if code != 125 || out != "" || errs != want {
			t.Errorf("runbox %v: status %d, stdout %q, stderr %q; want 125 and %q", args, code, out, errs, want)
		}
	}
	code, out, errs = c.run("up", "--provider", "kubernetes", "--image", testImage, "--from", "snap")
	if code != 125 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "provider kubernetes cannot snapshot: unsupported operation by this provider") {
		t.Errorf("up --from on kubernetes: status %d, stdout %q, stderr %q; want 125 and one line saying kubernetes cannot snapshot", code, out, errs)
	}
	if st := providertest.LSStatus(t, c.run, id); st != "up" {
		t.Errorf("ls after the refusals says %q, want up", st)
	}

	marker := fmt.Sprintf("busy%d", time.Now().UnixNano())
	if code, _, errs := c.run("exec", "--detach", "kbranch", "--", "exec sh -c 'while :; do :; done' "+marker); code != 0 {
		t.Fatalf("exec --detach: status %d: %s", code, errs)
	}
	waitCount(t, sb, marker, 1, "the busy loop")
	pid := 0
	for _, pr := range podProcs(t, sb) {
		if strings.Contains(pr.args, marker) {
			pid = pr.pid
		}
	}
	if code, out, errs := c.run("pause", "kbranch"); code != 0 || out != id+"\n" {
		t.Fatalf("pause: status %d, stdout %q: %s", code, out, errs)
	}
	frozen := providertest.CPUTicks(t, pid)
	if st := providertest.LSStatus(t, c.run, id); st != "paused" {
		t.Errorf("ls of the paused sandbox says %q, want paused", st)
	}
	code, out, errs = c.run("inspect", "kbranch")
	var insp struct {
		Detail map[string]string `json:"detail"`
		Daemon *struct {
			Paused bool `json:"paused"`
		} `json:"daemon"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &insp) != nil || insp.Daemon == nil || !insp.Daemon.Paused || insp.Detail["paused"] != "true" {
		t.Errorf("inspect of the paused sandbox: status %d, %s %s; want detail.paused and daemon.paused", code, out, errs)
	}
	if code, _, errs := c.run("exec", "kbranch", "--", "true"); code != 125 || !strings.Contains(errs, "paused") {
		t.Errorf("exec on the paused sandbox: status %d, stderr %q; want 125 naming the state", code, errs)
	}
	// Long enough for a loop that runs to use CPU; it must not.
	time.Sleep(300 * time.Millisecond)
	if now := providertest.CPUTicks(t, pid); now != frozen {
		t.Errorf("the busy loop used %d ticks while paused", now-frozen)
	}
	if code, _, errs := c.run("resume", "kbranch"); code != 0 {
		t.Fatalf("resume: status %d: %s", code, errs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for providertest.CPUTicks(t, pid) == frozen && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if providertest.CPUTicks(t, pid) == frozen {
		t.Error("the busy loop did not run again after resume")
	}
	if st := providertest.LSStatus(t, c.run, id); st != "up" {
		t.Errorf("ls after resume says %q, want up", st)
	}
}
