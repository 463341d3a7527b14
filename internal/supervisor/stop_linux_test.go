package supervisor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// startTree starts a tree of n `sleep m` (ignoring SIGTERM when ignoreTerm)
// under one shell, and waits until /proc shows all of them running.
func startTree(t *testing.T, s *Supervisor, n int, m string, ignoreTerm bool, grace time.Duration) *Exec {
	t.Helper()
	trap := ""
	if ignoreTerm {
		trap = "trap '' TERM; "
	}
	cmd := fmt.Sprintf("%sfor i in $(seq %d); do sleep %s & done; wait", trap, n, m)
	e, _, err := s.Start(runbox.ExecSpec{Command: cmd, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); countAlive(m) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d `sleep %s` running after 2 minutes", countAlive(m), n, m)
		}
	}
	return e
}

// TestCancelStopsWholeTree: a cancelled exec's tree, 1000 processes that
// obey SIGTERM or 100 that ignore it (SIGKILL after the grace), is gone
// when its Result is final: the survivors are counted in /proc, not taken
// from the daemon's books.
func TestCancelStopsWholeTree(t *testing.T) {
	for _, mode := range modes(t) {
		for _, tc := range []struct {
			n          int
			ignoreTerm bool
		}{{1000, false}, {100, true}} {
			t.Run(fmt.Sprintf("%s/%d/ignore-term=%v", mode, tc.n, tc.ignoreTerm), func(t *testing.T) {
				s := newSup(t, mode)
				m := marker()
				e := startTree(t, s, tc.n, m, tc.ignoreTerm, 200*time.Millisecond)
				s.Cancel(e.ID(), 0)
				r := waitResult(t, e)
				if n := countAlive(m); n != 0 {
					t.Errorf("%d of %d `sleep %s` survived the cancel", n, tc.n, m)
					killMarked(m)
				}
				want := 143
				if tc.ignoreTerm {
					want = 137
				}
				if !r.Cancelled || r.ExitCode != want || r.Survivors != 0 {
					t.Errorf("cancelled=%v exit=%d survivors=%d; want cancelled, exit %d, no survivors", r.Cancelled, r.ExitCode, r.Survivors, want)
				}
				if r.Killed < tc.n+1 {
					t.Errorf("result says %d processes were signalled; want at least %d", r.Killed, tc.n+1)
				}
				if r := run(t, s, runbox.ExecSpec{Command: "echo ok"}); strings.TrimSpace(string(r.Stdout)) != "ok" {
					t.Errorf("next exec: %q", r.Stdout)
				}
			})
		}
	}
}
