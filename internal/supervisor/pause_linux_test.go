package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// readCounter reads the number a counter loop last wrote to path (0 when
// it has written nothing yet, or the write is half done).
func readCounter(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// cpuTicks sums utime and stime of pid from /proc/PID/stat.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestPauseFreezesCommands: a busy counter loop (with a child process per
// round, so the tree changes under the freeze) stops advancing and uses no
// CPU while the sandbox is paused, and goes on after resume; its output is
// intact.
func TestPauseFreezesCommands(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			f := filepath.Join(t.TempDir(), "counter")
			e, _, err := s.Start(runbox.ExecSpec{Command: `i=0; while [ $i -lt 100000000 ]; do i=$((i+1)); if [ $((i % 200)) = 0 ]; then echo $i > ` + f + `; /bin/true; fi; done`})
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the counter to start", func() bool { return readCounter(f) > 0 })
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			if !s.Info().Paused {
				t.Error("Info does not say paused")
			}
			v1, cpu1 := readCounter(f), cpuTicks(t, e.Pid())
			time.Sleep(500 * time.Millisecond)
			v2, cpu2 := readCounter(f), cpuTicks(t, e.Pid())
			if v1 != v2 {
				t.Errorf("counter moved while paused: %d then %d", v1, v2)
			}
			if cpu1 != cpu2 {
				t.Errorf("the loop used CPU while paused: %d then %d ticks", cpu1, cpu2)
			}
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
			if s.Info().Paused {
				t.Error("Info still says paused after resume")
			}
			waitFor(t, "the counter to go on after resume", func() bool { return readCounter(f) > v2 })
			if _, err := s.Cancel(e.ID(), runbox.NoGrace); !err {
				t.Fatal("cancel: unknown exec")
			}
			r := waitResult(t, e)
			if !r.Cancelled {
				t.Errorf("result %+v, want cancelled", r)
			}
		})
	}
}

// TestPauseStopsDeadline: an exec whose timeout passes, on the wall clock,
// while the sandbox is paused is not stopped: after resume it finishes
// with the time it had left. One that runs past its active time still
// times out after the resume.
func TestPauseStopsDeadline(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			finishes, _, err := s.Start(runbox.ExecSpec{Command: "sleep 1; echo ok", Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			overruns, _, err := s.Start(runbox.ExecSpec{Command: "echo start; sleep 30", Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-finishes.Done():
				t.Fatalf("exec ended while paused: %+v", finishes.Result())
			case <-overruns.Done():
				t.Fatalf("exec ended while paused: %+v", overruns.Result())
			case <-time.After(3 * time.Second): // past both timeouts
			}
			if err := s.Resume(); err != nil {
				t.Fatal(err)
			}
			r := waitResult(t, finishes)
			if r.TimedOut || r.ExitCode != 0 || string(r.Stdout) != "ok\n" {
				t.Errorf("paused exec: %+v (stdout %q), want exit 0 with ok", r, r.Stdout)
			}
			r = waitResult(t, overruns)
			if !r.TimedOut || string(r.Stdout) != "start\n" {
				t.Errorf("overrunning exec: %+v (stdout %q), want timed out with its output", r, r.Stdout)
			}
		})
	}
}

// TestPauseRefusesNewExecs: while paused a new exec is refused with
// ErrSandboxPaused; pause and resume are idempotent.
func TestPauseRefusesNewExecs(t *testing.T) {
	s := newSup(t, "off")
	if err := s.Resume(); err != nil {
		t.Errorf("resume of a running sandbox: %v, want nil (idempotent)", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Errorf("second pause: %v, want nil (idempotent)", err)
	}
	_, _, err := s.Start(runbox.ExecSpec{Command: "true"})
	if !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Fatalf("start while paused: %v, want ErrSandboxPaused", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if r := run(t, s, runbox.ExecSpec{Command: "echo hi"}); string(r.Stdout) != "hi\n" {
		t.Errorf("after resume: %+v", r)
	}
}

// TestPauseStopsIdleClock: an exec's idle timeout does not fire while the
// sandbox is paused, however long the pause; after resume it still
// idle-times out once it is quiet for its idle timeout.
func TestPauseStopsIdleClock(t *testing.T) {
	s := newSup(t, modes(t)[len(modes(t))-1])
	e, _, err := s.Start(runbox.ExecSpec{Command: "echo start; sleep 1; echo mid; sleep 30", IdleTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Done():
		t.Fatalf("idle-timed out while paused: %+v", e.Result())
	case <-time.After(3 * time.Second): // past the idle timeout
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	r := waitResult(t, e)
	if !r.IdleTimedOut || string(r.Stdout) != "start\nmid\n" {
		t.Errorf("result %+v (stdout %q), want idle-timed out after start and mid", r, r.Stdout)
	}
}
