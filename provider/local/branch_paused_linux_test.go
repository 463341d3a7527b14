package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
)

// busyPid starts a busy loop (a process of its own, named by a unique
// marker) in c's sandbox and returns its host pid, with the exec's id.
func busyPid(t *testing.T, c *client.Client) (pid int, execID string) {
	t.Helper()
	marker := "busy-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	proc, err := c.Start(context.Background(), "exec sh -c 'while :; do :; done' "+marker)
	if err != nil {
		t.Fatal(err)
	}
	if !poll(30*time.Second, func() bool {
		pid = findMarker(marker)
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return pid != 0 && strings.Contains(string(b), "while")
	}) {
		t.Fatalf("no busy loop %s on the host", marker)
	}
	return pid, proc.ID()
}

// TestSnapshotOfAPausedSandboxKeepsItPaused: a snapshot and a fork of a
// sandbox its user paused leave it paused: its busy loop uses no CPU
// (counted from /proc) across runbox snapshot and runbox fork until runbox
// resume, runboxd says paused after them, ls says paused and inspect's
// detail and daemon say so; resume lets the loop run again and ls says up.
// A snapshot of a running sandbox leaves it running. (Before, Snapshot
// resumed whatever it had paused, so the loop ran on after the snapshot.)
func TestSnapshotOfAPausedSandboxKeepsItPaused(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	cliEnv(t, p)
	t.Cleanup(func() { os.RemoveAll(p.Home + "-workspaces") })
	sb, c := create(t, p, runbox.SandboxSpec{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pid, execID := busyPid(t, c)
	defer c.Cancel(context.Background(), execID, runbox.NoGrace)

	// Running: a snapshot leaves it running.
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "up" {
		t.Errorf("ls of a running sandbox says %q, want up", st)
	}
	if code, _, errs := runCLI(t, "snapshot", sb.ID, "running"); code != 0 {
		t.Fatalf("runbox snapshot of a running sandbox: exit %d: %s", code, errs)
	}
	if info, err := c.Info(ctx); err != nil || info.Paused {
		t.Errorf("Info after a snapshot of a running sandbox: %+v, %v; want it running", info, err)
	}
	c0 := providertest.CPUTicks(t, pid)
	if !poll(30*time.Second, func() bool { return providertest.CPUTicks(t, pid) > c0 }) {
		t.Error("the busy loop does not run after a snapshot of the running sandbox")
	}

	if code, _, errs := runCLI(t, "pause", sb.ID); code != 0 {
		t.Fatalf("runbox pause: exit %d: %s", code, errs)
	}
	frozen := providertest.CPUTicks(t, pid)
	if code, out, errs := runCLI(t, "snapshot", sb.ID, "paused"); code != 0 || out != "paused\n" {
		t.Fatalf("runbox snapshot of a paused sandbox: exit %d, stdout %q: %s", code, out, errs)
	}
	if info, err := c.Info(ctx); err != nil || !info.Paused {
		t.Errorf("Info after the snapshot: %+v, %v; want it paused", info, err)
	}
	if _, err := c.Exec(ctx, "true"); !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Errorf("exec after the snapshot: %v, want ErrSandboxPaused", err)
	}
	code, out, errs := runCLI(t, "fork", sb.ID)
	if code != 0 {
		t.Fatalf("runbox fork of a paused sandbox: exit %d: %s", code, errs)
	}
	fid := strings.TrimSpace(out)
	fsb, err := p.Get(ctx, fid)
	if err != nil {
		t.Fatalf("the fork %q: %v", fid, err)
	}
	t.Cleanup(func() { _ = p.Remove(context.Background(), fsb, true) })
	fc := client.New(p.Dialer(fsb), client.WithSandboxName(fid))
	defer fc.Close()
	if got := run(t, fc, "echo fork-runs"); got != "fork-runs\n" {
		t.Errorf("the fork says %q", got)
	}
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "paused" {
		t.Errorf("ls of the paused sandbox after snapshot and fork says %q, want paused", st)
	}
	if st := providertest.LSStatus(t, cliOf(t), fid); st != "up" {
		t.Errorf("ls of its fork says %q, want up", st)
	}
	if detail, daemon := providertest.InspectPaused(t, cliOf(t), sb.ID); detail != "true" || !daemon {
		t.Errorf("inspect of the paused sandbox: detail.paused %q, daemon.paused %v; want both paused", detail, daemon)
	}
	// Long enough for a loop that runs to use CPU; it must not.
	time.Sleep(300 * time.Millisecond)
	if now := providertest.CPUTicks(t, pid); now != frozen {
		t.Errorf("the busy loop used %d ticks of CPU across the snapshot and the fork of its paused sandbox", now-frozen)
	}

	if code, _, errs := runCLI(t, "resume", sb.ID); code != 0 {
		t.Fatalf("runbox resume: exit %d: %s", code, errs)
	}
	if !poll(30*time.Second, func() bool { return providertest.CPUTicks(t, pid) > frozen }) {
		t.Error("the busy loop did not run again after resume")
	}
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "up" {
		t.Errorf("ls after resume says %q, want up", st)
	}
	if detail, daemon := providertest.InspectPaused(t, cliOf(t), sb.ID); detail != "" || daemon {
		t.Errorf("inspect after resume: detail.paused %q, daemon.paused %v; want neither", detail, daemon)
	}
}
