package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runbox/runbox"
)

// These tests run real processes in the test binary. The supervisor reaps
// every child of the process, so nothing here may use os/exec.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/signal.signal_recv"),
		goleak.IgnoreTopFunction("os/signal.loop"))
}

func modes(t *testing.T) []string {
	ms := []string{"off"}
	if _, err := findCgroup2Dir(); err == nil && os.Geteuid() == 0 {
		ms = append(ms, ModeCgroup2)
	} else if os.Getenv("RUNBOX_REQUIRE_CGROUP2") == "1" {
		t.Fatalf("cgroup2 required but unavailable: %v", err)
	}
	return ms
}

func newSup(t *testing.T, mode string) *Supervisor {
	t.Helper()
	s, err := New(Config{CgroupMode: mode, Retention: 200 * time.Millisecond, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	return s
}

// shutdown shuts s down, stopping what still runs.
func shutdown(t testing.TB, s *Supervisor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx, time.Second); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func run(t *testing.T, s *Supervisor, spec runbox.ExecSpec) runbox.Result {
	t.Helper()
	e, _, err := s.Start(spec)
	if err != nil {
		t.Fatalf("start %q: %v", spec.Command, err)
	}
	return waitResult(t, e)
}

// waitResult waits for e to end (a minute at most) and returns its result.
func waitResult(t *testing.T, e *Exec) runbox.Result {
	t.Helper()
	select {
	case <-e.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("exec %q did not finish", e.command())
	}
	return e.Result()
}

// marker returns a unique `sleep N` argument so parallel test binaries never
// count each other's processes.
func marker() string { return strconv.Itoa(30000000 + rand.IntN(9000000)) }

// countAlive counts live non-zombie processes whose cmdline contains
// "sleep\x00"+m, straight from /proc.
func countAlive(m string) int {
	names, _ := os.ReadDir("/proc")
	n := 0
	for _, d := range names {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte("sleep\x00"+m)) {
			continue
		}
		if st, ok := readProcStat(pid); ok && !st.zombie {
			n++
		}
	}
	return n
}

func TestExitCodesAndOutput(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			for _, code := range []int{0, 1, 3, 42, 255} {
				r := run(t, s, runbox.ExecSpec{Command: fmt.Sprintf("exit %d", code)})
				if r.ExitCode != code {
					t.Errorf("exit %d: got %d", code, r.ExitCode)
				}
			}
			r := run(t, s, runbox.ExecSpec{Command: "kill -9 $$"})
			if r.ExitCode != 137 || r.Signal != "KILL" {
				t.Errorf("kill -9: got %d %q", r.ExitCode, r.Signal)
			}
			r = run(t, s, runbox.ExecSpec{Command: "printf out; printf err >&2"})
			if string(r.Stdout) != "out" || string(r.Stderr) != "err" {
				t.Errorf("output: %q %q", r.Stdout, r.Stderr)
			}
			r = run(t, s, runbox.ExecSpec{Argv: []string{"cat"}, Stdin: []byte("a\nb\n")})
			if string(r.Stdout) != "a\nb\n" {
				t.Errorf("stdin: %q", r.Stdout)
			}
			if _, _, err := s.Start(runbox.ExecSpec{Argv: []string{"no-such-binary-xyz"}}); !errors.Is(err, runbox.ErrSpawn) {
				t.Errorf("missing binary: %v", err)
			}
			if _, _, err := s.Start(runbox.ExecSpec{Command: "true", Cwd: "/no/such/dir"}); !errors.Is(err, runbox.ErrSpawn) {
				t.Errorf("bad cwd: %v", err)
			}
		})
	}
}

func TestTimeoutKillsEscapees(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			m := marker()
			cmd := strings.ReplaceAll(`setsid sleep M & (setsid sh -c 'sleep M &' &); nohup sleep M >/dev/null 2>&1 & disown; sleep M`, "M", m)
			r := run(t, s, runbox.ExecSpec{Command: cmd, Timeout: time.Second})
			if !r.TimedOut || r.ExitCode != 143 {
				t.Errorf("got timed_out=%v exit=%d", r.TimedOut, r.ExitCode)
			}
			if r.Killed < 4 {
				t.Errorf("killed %d processes, want at least 4", r.Killed)
			}
			if n := countAlive(m); n != 0 {
				t.Errorf("%d survivors", n)
			}
			r = run(t, s, runbox.ExecSpec{Command: "echo ok"})
			if string(r.Stdout) != "ok\n" {
				t.Errorf("next exec: %q", r.Stdout)
			}
		})
	}
}

func TestTermIgnoredGetsKilled(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			m := marker()
			r := run(t, s, runbox.ExecSpec{Command: "trap '' TERM; sleep " + m, Timeout: 300 * time.Millisecond, Grace: 500 * time.Millisecond})
			if r.ExitCode != 137 || r.Signal != "KILL" || !r.TimedOut {
				t.Errorf("got %+v", r)
			}
			if n := countAlive(m); n != 0 {
				t.Errorf("%d survivors", n)
			}
		})
	}
}

func TestBackgroundChildSurvivesNormalExit(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			m := marker()
			start := time.Now()
			r := run(t, s, runbox.ExecSpec{ID: "bg", Command: "sleep " + m + " & echo started"})
			if string(r.Stdout) != "started\n" || r.ExitCode != 0 {
				t.Fatalf("got %+v", r)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("inherited pipe held the call for %v", time.Since(start))
			}
			if n := countAlive(m); n != 1 {
				t.Fatalf("background sleep: %d alive, want 1", n)
			}
			e, known := s.Cancel("bg", 200*time.Millisecond)
			if !known || e == nil {
				t.Fatal("cancel: exec not known")
			}
			if err := e.WaitStopped(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := countAlive(m); n != 0 {
				t.Errorf("after cancel: %d alive", n)
			}
		})
	}
}

func TestCancelRace(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			m := marker()
			var wg sync.WaitGroup
			for i := range 200 {
				id := fmt.Sprintf("race-%d", i)
				delay := time.Duration(rand.IntN(5000)) * time.Microsecond
				cancelFirst := i%10 == 0
				wg.Go(func() {
					if cancelFirst {
						s.Cancel(id, 0)
					}
					e, _, err := s.Start(runbox.ExecSpec{ID: id, Command: "sleep " + m, Grace: time.Second})
					if err != nil {
						if !errors.Is(err, runbox.ErrCancelled) {
							t.Errorf("%s: %v", id, err)
						}
						return
					}
					time.Sleep(delay)
					s.Cancel(id, 0)
					<-e.Done()
					r := e.Result()
					if !r.Cancelled || (r.ExitCode != 143 && r.ExitCode != 137) {
						t.Errorf("%s: %+v", id, r)
					}
				})
			}
			wg.Wait()
			if n := countAlive(m); n != 0 {
				t.Errorf("%d survivors", n)
			}
		})
	}
}

// TestNoZombies: orphans that outlive their exec's leader are reparented
// to the supervisor (a subreaper) and reaped when they exit. Each orphan
// waits for a gate file, so the test sees all of them reparented here before
// it lets them exit; then it waits for the effect (no child left, live or
// zombie, beyond those it had before) against a generous deadline.
func TestNoZombies(t *testing.T) {
	s := newSup(t, "auto")
	self := os.Getpid()
	children := func() (live, zombies []int) {
		for _, p := range allProcs() {
			if p.ppid != self {
				continue
			}
			if p.zombie {
				zombies = append(zombies, p.pid)
			} else {
				live = append(live, p.pid)
			}
		}
		return live, zombies
	}
	baseLive, _ := children()
	gate := filepath.Join(t.TempDir(), "gate")
	// Whatever happens, let the orphans go before the directory does.
	t.Cleanup(func() { os.WriteFile(gate, nil, 0o600) })
	const orphans = 20
	for range orphans {
		r := run(t, s, runbox.ExecSpec{Command: "(while [ ! -e " + gate + " ]; do sleep 0.01; done &); true"})
		if !r.OK() {
			t.Fatalf("exit %d, stderr %q", r.ExitCode, r.Stderr)
		}
	}
	waitChildren := func(what string, done func(live, zombies []int) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			live, zombies := children()
			if done(live, zombies) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 30s, zombie children %v, live children %v (%d before)", what, zombies, live, len(baseLive))
			}
		}
	}
	waitChildren("orphans reparented to the supervisor", func(live, _ []int) bool { return len(live) >= len(baseLive)+orphans })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitChildren("orphans reaped", func(live, zombies []int) bool { return len(zombies) == 0 && len(live) <= len(baseLive) })
}

func TestRetentionForgetsExecs(t *testing.T) {
	s := newSup(t, "auto")
	for range 20 {
		run(t, s, runbox.ExecSpec{Command: "true"})
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Info().Retained != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := s.Info().Retained; n != 0 {
		t.Errorf("%d execs retained past the retention window", n)
	}
}

// A Run that arrives long after its cancel (a loaded network) is still
// refused, even when exited execs are forgotten quickly.
func TestTombstoneOutlivesShortRetention(t *testing.T) {
	s := newSup(t, "auto")
	if _, known := s.Cancel("late", 0); known {
		t.Fatal("unknown id reported known")
	}
	s.sweep(time.Now().Add(time.Minute)) // well past the 200ms retention
	if _, _, err := s.Start(runbox.ExecSpec{ID: "late", Command: "true"}); !errors.Is(err, runbox.ErrCancelled) {
		t.Errorf("start after cancel: %v; want ErrCancelled", err)
	}
}
