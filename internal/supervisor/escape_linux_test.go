package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// escapeCommand is the attack of issue 13 item 7: a root command moves its
// shell out of the exec's cgroup (into the daemon's own, writable to root),
// then starts a new session that sleeps on. The cgroup the daemon watches is
// then empty while the sleep runs.
func escapeCommand(t *testing.T, m, then string) string {
	t.Helper()
	own, err := findCgroup2Dir()
	if err != nil {
		t.Skipf("no cgroup v2 directory: %v", err)
	}
	return "echo $BASHPID > " + filepath.Join(own, "cgroup.procs") + " || exit 9; setsid sleep " + m + " & " + then
}

// TestStopKillsCgroupEscapees: in cgroup2 mode a process that moved itself
// out of its exec's cgroup still dies when the exec times out, is
// cancelled, or when the daemon shuts down after the exec ended by itself:
// runboxd finds it by the marker in its environment. Survivors are counted
// from /proc by a unique `sleep N`.
func TestStopKillsCgroupEscapees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("moving a process between cgroups needs root: run the tests as root (CI does)")
	}
	if _, err := findCgroup2Dir(); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_CGROUP2") == "1" {
			t.Fatalf("cgroup2 required but unavailable: %v", err)
		}
		t.Skipf("no cgroup v2: %v", err)
	}
	t.Run("timeout", func(t *testing.T) {
		s := newSup(t, ModeCgroup2)
		m := marker()
		r := run(t, s, runbox.ExecSpec{Command: escapeCommand(t, m, "sleep 300"), Timeout: 500 * time.Millisecond, Grace: 200 * time.Millisecond})
		if !r.TimedOut {
			t.Fatalf("exit %d, stderr %q: want a timeout (did the escape fail?)", r.ExitCode, r.Stderr)
		}
		if n := countAlive(m); n != 0 {
			t.Errorf("%d `sleep %s` outside the exec's cgroup survived the timeout", n, m)
			killMarked(m)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		s := newSup(t, ModeCgroup2)
		m := marker()
		e, _, err := s.Start(runbox.ExecSpec{Command: escapeCommand(t, m, "sleep 300"), Grace: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		waitCount(t, m, 1)
		s.Cancel(e.ID(), 0)
		if r := waitResult(t, e); !r.Cancelled {
			t.Fatalf("exit %d, stderr %q: want cancelled", r.ExitCode, r.Stderr)
		}
		if n := countAlive(m); n != 0 {
			t.Errorf("%d `sleep %s` outside the exec's cgroup survived the cancel", n, m)
			killMarked(m)
		}
	})
	t.Run("cancel, the escapee ignores SIGTERM", func(t *testing.T) {
		// Outside the cgroup, cgroup.kill does not reach it: after the
		// grace the stop protocol must find it again and kill it.
		s := newSup(t, ModeCgroup2)
		m := marker()
		e, _, err := s.Start(runbox.ExecSpec{Command: "trap '' TERM; " + escapeCommand(t, m, "sleep 300"), Grace: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		waitCount(t, m, 1)
		s.Cancel(e.ID(), 0)
		if r := waitResult(t, e); !r.Cancelled || r.Survivors != 0 {
			t.Fatalf("exit %d, survivors %d, stderr %q: want cancelled, none surviving", r.ExitCode, r.Survivors, r.Stderr)
		}
		if n := countAlive(m); n != 0 {
			t.Errorf("%d `sleep %s` outside the exec's cgroup that ignore SIGTERM survived the cancel", n, m)
			killMarked(m)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		s, err := New(Config{CgroupMode: ModeCgroup2, Retention: 50 * time.Millisecond, Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		m := marker()
		r := run(t, s, runbox.ExecSpec{Command: escapeCommand(t, m, "exit 0")})
		if !r.OK() {
			t.Fatalf("exit %d, stderr %q: want 0", r.ExitCode, r.Stderr)
		}
		waitCount(t, m, 1)
		// Past retention the ended exec (its cgroup empty) is forgotten:
		// wait for that, not for a time.
		for deadline := time.Now().Add(time.Minute); s.Info().Retained != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the ended exec is still retained a minute past its %v retention", 50*time.Millisecond)
			}
		}
		shutdown(t, s)
		if n := countAlive(m); n != 0 {
			t.Errorf("%d `sleep %s` outside the exec's cgroup survived the daemon's shutdown", n, m)
			killMarked(m)
		}
	})
}

// waitCount waits until n `sleep m` processes run (a minute at most).
func waitCount(t *testing.T, m string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); countAlive(m) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d `sleep %s` running, want %d", countAlive(m), m, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killMarked kills every `sleep m` left behind by a failed case.
func killMarked(m string) {
	for _, st := range allProcs() {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(st.pid) + "/cmdline")
		if string(cmd) == "sleep\x00"+m+"\x00" {
			_ = syscall.Kill(st.pid, syscall.SIGKILL)
		}
	}
}
