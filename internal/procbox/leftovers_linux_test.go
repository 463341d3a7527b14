package procbox

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/processrecord"
)

// A damaged or rewritten record never makes Remove kill outside what
// runboxd made: a cgroup not named runboxd-<recorded pid>-<n> is refused
// before anything is written, and only processes carrying the exact
// marker are killed, counted from /proc.
func TestLeftoverKillIsNarrow(t *testing.T) {
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified/docker",
		"/sys/fs/cgroup/unified/runboxd-42-7", "/sys/fs/cgroup/unified/runboxd-1-7/../docker", "runboxd-1-7"} {
		if _, err := killCgroup(context.Background(), dir, 1); err == nil {
			t.Errorf("killCgroup(%s, pid 1): no error; want it refused", dir)
		}
	}
	start := func(mark string) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.Env = append(os.Environ(), "RUNBOX_DAEMON="+mark)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	const mark = "0123456789abcdef01234567"
	_, since, err := processrecord.ProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	target, other, prefix := start(mark), start(mark+"0"), start(mark[:16])
	n, err := killMarked(context.Background(), mark, since)
	if err != nil || n != 1 {
		t.Fatalf("killMarked: %d killed, %v; want the one process carrying the marker", n, err)
	}
	target.Wait()
	for _, c := range []*exec.Cmd{other, prefix} {
		if _, start, err := processrecord.ProcStat(c.Process.Pid); err != nil || !processrecord.SameProcess(c.Process.Pid, start) {
			t.Errorf("pid %d, marked with another daemon's marker, was killed", c.Process.Pid)
		}
	}
	// A process started before the daemon is not its: not killed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	late := start(mark)
	_, lateStart, _ := processrecord.ProcStat(late.Process.Pid)
	if n, err := killMarked(ctx, mark, lateStart+1); err != nil || n != 0 {
		t.Errorf("killMarked of a daemon started after the process: %d killed, %v; want none", n, err)
	}
}

// TestValidMark: runboxd's marker is 16 to 64 lower-case hex digits and
// nothing else.
func TestValidMark(t *testing.T) {
	for mark, want := range map[string]bool{
		"0123456789abcdef":       true,
		strings.Repeat("f", 64):  true,
		strings.Repeat("0", 15):  false,
		strings.Repeat("a", 65):  false,
		"0123456789ABCDEF":       false,
		"0123456789abcdeg":       false,
		"0123456789abcdef\n":     false,
		"../0123456789abcdef":    false,
		"":                       false,
		"0123456789abcdef 01234": false,
	} {
		if got := validMark(mark); got != want {
			t.Errorf("validMark(%q) = %v, want %v", mark, got, want)
		}
	}
}
