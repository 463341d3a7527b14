package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// cgroupSup is a supervisor in cgroup2 mode, or the test is skipped (failed
// under RUNBOX_REQUIRE_CGROUP2=1) where there is none.
func cgroupSup(t *testing.T) *Supervisor {
	t.Helper()
	ms := modes(t)
	if ms[len(ms)-1] != ModeCgroup2 {
		t.Skip("needs root and a writable cgroup v2 hierarchy: run the tests as root (CI does)")
	}
	return newSup(t, ModeCgroup2)
}

// ownCgroup runs `cat /proc/self/cgroup` (then then, if not empty) and
// returns the directory of the exec's cgroup under the daemon's.
func ownCgroup(t *testing.T, s *Supervisor, then string, spec runbox.ExecSpec) (string, runbox.Result) {
	t.Helper()
	spec.Command = "cat /proc/self/cgroup" + then
	r := run(t, s, spec)
	for line := range strings.SplitSeq(string(r.Stdout), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(s.cgroups.dir, filepath.Base(rest)), r
		}
	}
	t.Fatalf("no cgroup v2 line in %q (%+v)", r.Stdout, r)
	return "", r
}

func exists(dir string) bool { _, err := os.Stat(dir); return err == nil }

// TestEmptiedCgroupIsReused: an exec that ends with nothing left running
// hands its (empty) cgroup to the next exec, which is its only member; a
// cgroup that was killed (cgroup.kill) or still holds a background process
// is never handed on, and a killed one is removed before the Result.
func TestEmptiedCgroupIsReused(t *testing.T) {
	s := cgroupSup(t)
	first, _ := ownCgroup(t, s, "", runbox.ExecSpec{})
	for i := range 5 {
		// The reused cgroup holds the exec alone: bash runs the one
		// command in place, so cgroup.procs lists exactly one pid, cat's.
		dir, r := ownCgroup(t, s, "; cat "+filepath.Join(first, "cgroup.procs"), runbox.ExecSpec{})
		if dir != first {
			t.Fatalf("exec %d ran in %s, want the emptied %s reused", i, dir, first)
		}
		var pids []string // the lines of cgroup.procs, after /proc/self/cgroup's
		for f := range strings.FieldsSeq(string(r.Stdout)) {
			if _, err := strconv.Atoi(f); err == nil {
				pids = append(pids, f)
			}
		}
		if len(pids) != 1 {
			t.Fatalf("exec %d: its cgroup held %q, want one pid (its own): %q", i, pids, r.Stdout)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(s.cgroups.dir, "e*")); len(entries) != 1 {
		t.Errorf("exec cgroups after 6 execs one at a time: %v, want one", entries)
	}

	// Killed by its timeout: removed before its Result, not reused.
	m := marker()
	killed, r := ownCgroup(t, s, "; exec sleep "+m, runbox.ExecSpec{Timeout: 200 * time.Millisecond, Grace: runbox.NoGrace})
	if !r.TimedOut {
		t.Fatalf("sleep: %+v, want timed out", r)
	}
	if killed != first {
		t.Fatalf("the timed-out exec ran in %s, want the emptied %s reused", killed, first)
	}
	if exists(killed) {
		t.Errorf("the killed exec's cgroup %s is still there after its Result", killed)
	}
	if dir, _ := ownCgroup(t, s, "", runbox.ExecSpec{}); dir == killed {
		t.Errorf("the next exec ran in the killed exec's cgroup %s", dir)
	}

	// A background process keeps its exec's cgroup out of reuse until it
	// is stopped.
	m = marker()
	held, r := ownCgroup(t, s, "; sleep "+m+" &", runbox.ExecSpec{ID: "bg"})
	if r.LeftRunning != 1 {
		t.Fatalf("left running %d, want 1 (%+v)", r.LeftRunning, r)
	}
	other, _ := ownCgroup(t, s, "", runbox.ExecSpec{})
	if other == held {
		t.Fatalf("an exec ran in %s, which still holds a background process", held)
	}
	// The finished exec cannot signal what now runs elsewhere: Signal on it
	// reaches its own background process only.
	if n, err := s.Signal("bg", syscall.Signal(0)); err != nil || n != 1 {
		t.Errorf("signal 0 to the exec with one background process: %d, %v", n, err)
	}
	if e, known := s.Cancel("bg", 100*time.Millisecond); !known {
		t.Fatal("cancel bg: not known")
	} else if err := e.WaitStopped(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Stopped by SIGTERM alone (no cgroup.kill), the emptied cgroup may be
	// handed on: to an exec that is its only member.
	if procs, err := os.ReadFile(filepath.Join(held, "cgroup.procs")); err == nil && len(procs) > 0 {
		t.Errorf("the cancelled exec's cgroup still holds %q", procs)
	}
	if n := countAlive(m); n != 0 {
		t.Errorf("%d `sleep %s` survived the cancel", n, m)
	}
}
