package ssh_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/branching"
	"github.com/runbox/runbox/internal/providertest"
)

// busyTicks is the CPU time (utime + stime, in clock ticks) of the one
// process whose command line holds marker, and its pid (0 when none).
func busyTicks(t *testing.T, marker string) (pid int, ticks int64) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !strings.Contains(string(b), marker) || !strings.Contains(string(b), "while") {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return n, u + s
	}
	return 0, 0
}

// TestBranchingOnSSH: an ssh sandbox cannot be snapshotted, so the
// provider is no runbox.Snapshotter (branching.SnapshotterOf says
// runbox.ErrUnsupported, which matches errors.ErrUnsupported too) and a
// Create from a snapshot is refused the same way, never a plain sandbox;
// through the real CLI runbox snapshot, runbox fork and runbox up --from
// exit 125 with one line naming the provider, and leave the sandbox as it
// was (ls: up). Pause is not refused: runboxd freezes the commands (a busy
// loop's CPU time in /proc stops), ls and inspect say paused, an exec
// exits 125 naming the state, and resume lets the loop run.
func TestBranchingOnSSH(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	if _, err := branching.SnapshotterOf(p); !errors.Is(err, runbox.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SnapshotterOf(ssh): %v, want ErrUnsupported", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sb, err := p.Create(ctx, runbox.SandboxSpec{FromSnapshot: "snap"}); !errors.Is(err, runbox.ErrUnsupported) {
		if err == nil {
			_ = p.Remove(ctx, sb, true)
		}
		t.Errorf("Create from a snapshot on ssh: %v, want ErrUnsupported", err)
	}

	c := newCLIEnv(t, e, true)
	code, out, errs := c.run(t, "up", "--provider", "ssh", "--ssh", "rbx", "--name", "remote")
	if code != 0 {
		t.Fatalf("up: status %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { c.run(t, "rm", "-f", id) })
	for _, args := range [][]string{{"snapshot", "remote"}, {"snapshot", "remote", "named"}, {"fork", "remote", "--count", "2"}} {
		code, out, errs := c.run(t, args...)
		want := "runbox: " + args[0] + " sandbox remote: provider ssh cannot snapshot: unsupported operation by this provider\n"
		if code != 125 || out != "" || errs != want {
			t.Errorf("runbox %v: status %d, stdout %q, stderr %q; want 125 and %q", args, code, out, errs, want)
		}
	}
	code, out, errs = c.run(t, "up", "--provider", "ssh", "--ssh", "rbx", "--from", "snap")
	if code != 125 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "provider ssh cannot snapshot: unsupported operation by this provider") {
		t.Errorf("up --from on ssh: status %d, stdout %q, stderr %q; want 125 and one line saying ssh cannot snapshot", code, out, errs)
	}
	if st := providertest.LSStatus(t, c.cli(t), id); st != "up" {
		t.Errorf("ls after the refusals says %q, want up", st)
	}

	marker := fmt.Sprintf("busy%d", time.Now().UnixNano())
	if code, _, errs := c.run(t, "exec", "--detach", "remote", "--", "exec sh -c 'while :; do :; done' "+marker); code != 0 {
		t.Fatalf("exec --detach: status %d: %s", code, errs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for pid, _ := busyTicks(t, marker); pid == 0 && time.Now().Before(deadline); pid, _ = busyTicks(t, marker) {
		time.Sleep(20 * time.Millisecond)
	}
	if code, out, errs := c.run(t, "pause", "remote"); code != 0 || out != id+"\n" {
		t.Fatalf("pause: status %d, stdout %q: %s", code, out, errs)
	}
	pid, frozen := busyTicks(t, marker)
	if pid == 0 {
		t.Fatal("no busy loop on the host")
	}
	if st := providertest.LSStatus(t, c.cli(t), id); st != "paused" {
		t.Errorf("ls of the paused sandbox says %q, want paused", st)
	}
	code, out, errs = c.run(t, "inspect", "remote")
	var insp struct {
		Detail map[string]string `json:"detail"`
		Daemon *struct {
			Paused bool `json:"paused"`
		} `json:"daemon"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &insp) != nil || insp.Daemon == nil || !insp.Daemon.Paused || insp.Detail["paused"] != "true" {
		t.Errorf("inspect of the paused sandbox: status %d, %s %s; want detail.paused and daemon.paused", code, out, errs)
	}
	if code, _, errs := c.run(t, "exec", "remote", "--", "true"); code != 125 || !strings.Contains(errs, "paused") {
		t.Errorf("exec on the paused sandbox: status %d, stderr %q; want 125 naming the state", code, errs)
	}
	// Long enough for a loop that runs to use CPU; it must not.
	time.Sleep(300 * time.Millisecond)
	if _, now := busyTicks(t, marker); now != frozen {
		t.Errorf("the busy loop used %d ticks while paused", now-frozen)
	}
	if code, _, errs := c.run(t, "resume", "remote"); code != 0 {
		t.Fatalf("resume: status %d: %s", code, errs)
	}
	deadline = time.Now().Add(30 * time.Second)
	for _, now := busyTicks(t, marker); now == frozen && time.Now().Before(deadline); _, now = busyTicks(t, marker) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, now := busyTicks(t, marker); now == frozen {
		t.Error("the busy loop did not run again after resume")
	}
	if st := providertest.LSStatus(t, c.cli(t), id); st != "up" {
		t.Errorf("ls after resume says %q, want up", st)
	}
}
