package supervisor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// frozenWindow is how long a busy loop is watched for CPU ticks to tell
// frozen from running: a frozen loop gains none in it.
const frozenWindow = 300 * time.Millisecond

// assertFrozen checks that the busy loop pid gains no CPU tick in
// frozenWindow.
func assertFrozen(t *testing.T, what string, pid int) {
	t.Helper()
	c1 := cpuTicks(t, pid)
	time.Sleep(frozenWindow)
	if c2 := cpuTicks(t, pid); c1 != c2 {
		t.Fatalf("%s: the loop is running (%d then %d ticks), want it frozen", what, c1, c2)
	}
}

// assertRunning waits for the busy loop pid to gain CPU ticks.
func assertRunning(t *testing.T, what string, pid int) {
	t.Helper()
	c1 := cpuTicks(t, pid)
	waitFor(t, what+": the loop to run", func() bool { return cpuTicks(t, pid) > c1 })
}

// busyLoop starts an exec spinning in the shell and returns its leader's
// pid.
func busyLoop(t *testing.T, s *Supervisor) int {
	t.Helper()
	e, _, err := s.Start(runbox.ExecSpec{Command: "while :; do :; done"})
	if err != nil {
		t.Fatal(err)
	}
	assertRunning(t, "start", e.Pid())
	return e.Pid()
}

// TestHoldAndUserPause: the sandbox is frozen while the user's pause or
// any hold stands, in every order of pause, resume, hold and release:
// a resume during a hold leaves it frozen until the hold ends, a pause
// during a hold keeps it paused after, and Info says the user's pause
// and the holds apart. Each step's state is checked on a busy loop's CPU
// ticks in /proc, not on the supervisor's word.
func TestHoldAndUserPause(t *testing.T) {
	// Steps: P pause, R resume, H<n> take hold n, X<n> release hold n.
	// After each, the user's pause, the hold count and whether the loop
	// is frozen.
	type step struct {
		op     string
		paused bool
		holds  int
	}
	cases := [][]step{
		{{"H1", false, 1}, {"P", true, 1}, {"X1", true, 0}, {"R", false, 0}},
		{{"H1", false, 1}, {"P", true, 1}, {"R", false, 1}, {"X1", false, 0}},
		{{"P", true, 0}, {"H1", true, 1}, {"R", false, 1}, {"X1", false, 0}},
		{{"P", true, 0}, {"H1", true, 1}, {"X1", true, 0}, {"R", false, 0}},
		{{"H1", false, 1}, {"R", false, 1}, {"X1", false, 0}},
		{{"H1", false, 1}, {"H2", false, 2}, {"X1", false, 1}, {"P", true, 1}, {"X2", true, 0}, {"R", false, 0}},
		{{"H1", false, 1}, {"H2", false, 2}, {"X2", false, 1}, {"X2", false, 1}, {"X1", false, 0}, {"X1", false, 0}},
		{{"P", true, 0}, {"P", true, 0}, {"H1", true, 1}, {"R", false, 1}, {"R", false, 1}, {"P", true, 1}, {"X1", true, 0}, {"R", false, 0}},
	}
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			pid := busyLoop(t, s)
			for _, c := range cases {
				var names []string
				for _, st := range c {
					names = append(names, st.op)
				}
				what := strings.Join(names, ",")
				releases := map[string]func() error{}
				for i, st := range c {
					var err error
					switch op := st.op; {
					case op == "P":
						err = s.Pause()
					case op == "R":
						err = s.Resume()
					case op[0] == 'H':
						releases[op[1:]], err = s.Hold()
					case op[0] == 'X':
						err = releases[op[1:]]()
					}
					if err != nil {
						t.Fatalf("%s: step %d (%s): %v", what, i, st.op, err)
					}
					at := what + " after " + strings.Join(names[:i+1], ",")
					info := s.Info()
					if info.Paused != st.paused || info.Holds != st.holds {
						t.Fatalf("%s: Info says paused %v, %d holds; want %v, %d", at, info.Paused, info.Holds, st.paused, st.holds)
					}
					if st.paused || st.holds > 0 {
						assertFrozen(t, at, pid)
					} else {
						assertRunning(t, at, pid)
					}
				}
			}
		})
	}
}

// TestHoldRefusesExecsAndStopsClock: while only a hold stands a new exec
// is refused with runbox.ErrSandboxPaused, saying to retry rather than to
// resume (a hold ends by itself); an exec's deadline does not count the
// hold, as it does not count a pause.
func TestHoldRefusesExecsAndStopsClock(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			finishes, _, err := s.Start(runbox.ExecSpec{Command: "sleep 1; echo ok", Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			release, err := s.Hold()
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = s.Start(runbox.ExecSpec{Command: "true"})
			if !errors.Is(err, runbox.ErrSandboxPaused) || !strings.Contains(err.Error(), "retry") {
				t.Errorf("start during a hold: %v, want ErrSandboxPaused saying to retry", err)
			}
			select {
			case <-finishes.Done():
				t.Fatalf("exec ended while held: %+v", finishes.Result())
			case <-time.After(3 * time.Second): // past its timeout
			}
			if err := release(); err != nil {
				t.Fatal(err)
			}
			r := waitResult(t, finishes)
			if r.TimedOut || r.ExitCode != 0 {
				t.Errorf("result %+v, want a clean exit: the hold must not count against the deadline", r)
			}
			run(t, s, runbox.ExecSpec{Command: "true"})
		})
	}
}

// TestShutdownThawsHeld: Shutdown thaws a held (and paused) sandbox for
// good, so the stop protocol reaches its commands; a hold released after
// changes nothing.
func TestShutdownThawsHeld(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			e, _, err := s.Start(runbox.ExecSpec{Command: "trap 'exit 7' TERM; while :; do :; done"})
			if err != nil {
				t.Fatal(err)
			}
			assertRunning(t, "start", e.Pid())
			release, err := s.Hold()
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			shutdown(t, s)
			if r := waitResult(t, e); r.ExitCode != 7 {
				t.Errorf("result %+v, want exit 7 from its TERM trap", r)
			}
			if err := release(); err != nil {
				t.Errorf("release after shutdown: %v", err)
			}
			if _, err := s.Hold(); !errors.Is(err, runbox.ErrSandboxLost) {
				t.Errorf("hold after shutdown: %v, want ErrSandboxLost", err)
			}
		})
	}
}
