package supervisor

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// TestRetainedResultsAreBounded: the Results of exited execs are kept
// within RetainedResultBytes all together, however long the retention:
// past it the oldest exited execs are forgotten (a later Get says
// ErrExecNotFound, as past the retention), the newest keep their Results,
// and an exec whose background process still runs stays reachable for
// Cancel. Before the budget runboxd held every Result of the retention
// window (the soak grew it to 1.3 GiB in 30,000 commands).
func TestRetainedResultsAreBounded(t *testing.T) {
	const out, execs = 48 << 10, 24
	// Room for about four Results of out bytes (with the exec's overhead).
	const budget = 4 * (out + execOverhead)
	s, err := New(Config{CgroupMode: "off", Retention: time.Hour, RetainedResultBytes: budget, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	m := marker()
	bg, _, err := s.Start(runbox.ExecSpec{Command: "sleep " + m + " >/dev/null 2>&1 & echo up"})
	if err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, bg); r.LeftRunning != 1 {
		t.Fatalf("background exec: %+v", r)
	}
	var all []*Exec
	for range execs {
		e, _, err := s.Start(runbox.ExecSpec{Command: "head -c " + strconv.Itoa(out) + " /dev/zero"})
		if err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, e); r.StdoutBytes != out {
			t.Fatalf("%+v", r)
		}
		all = append(all, e)
	}
	held, kept := 0, 0
	for _, e := range all {
		if got, err := s.Get(e.id); err == nil {
			held += got.resultBytes()
			kept++
		} else if !errors.Is(err, runbox.ErrExecNotFound) {
			t.Errorf("get %s: %v, want ErrExecNotFound", e.id, err)
		}
	}
	t.Logf("%d of %d exited execs kept, %d bytes counted (budget %d)", kept, execs, held, budget)
	if held > budget || kept == 0 {
		t.Errorf("exited execs hold %d bytes of Results in %d execs, want at most %d and at least one", held, kept, budget)
	}
	newest, err := s.Get(all[len(all)-1].id)
	if err != nil {
		t.Fatalf("newest exec: %v", err)
	}
	if r := newest.Result(); len(r.Stdout) != out {
		t.Errorf("newest exec's result keeps %d bytes, want %d", len(r.Stdout), out)
	}
	if _, err := s.Get(all[0].id); !errors.Is(err, runbox.ErrExecNotFound) {
		t.Errorf("oldest exec: %v, want ErrExecNotFound", err)
	}
	// The background exec is older than every other, past the budget, and
	// still reachable: its process runs.
	e, known := s.Cancel(bg.id, 0)
	if !known {
		t.Fatal("the exec with a background process was forgotten: Cancel cannot reach its process")
	}
	if err := e.WaitStopped(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := countAlive(m); n != 0 {
		t.Errorf("%d background processes survive the cancel", n)
	}
}
