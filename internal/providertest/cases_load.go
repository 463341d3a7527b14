package providertest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/loadmix"
)

// Sizes of the load cases. Each runs for about a minute of a loaded
// two-core machine; RUNBOX_STRESS_OPS and RUNBOX_SOAK_OPS set others.
const (
	// loadStressOps is the stress case's operations: TestStress's count.
	loadStressOps = 480
	// loadSoakOps is the short soak's commands, the bench soak's mix; its
	// floods are loadSoakFlood bytes (the bench's are 10 MB), so a minute
	// holds 1,500 commands, and 190 floods still cross every ring.
	loadSoakOps   = 1500
	loadSoakFlood = 2 << 20
	// loadBound bounds a load case's run: a wedge fails the case, not the
	// test binary.
	loadBound = 10 * time.Minute
)

// loadCases are the cases that put minutes of load on one sandbox; they
// run where the fixture asks for them (Fixture.Load).
func loadCases() []testCase {
	return []testCase{
		{name: "Stress", run: testStress, heavy: true},
		{name: "Soak", run: testSoak, heavy: true},
	}
}

// skipUnlessLoad skips a load case the fixture does not ask for.
func skipUnlessLoad(t *testing.T, fx Fixture) {
	t.Helper()
	if !fx.Load {
		t.Skip("a load case: CI runs Stress and Soak on host, local and docker (Fixture.Load); this fixture does not ask for them")
	}
}

// opsFrom is the count in the environment variable name, or def.
func opsFrom(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// testStress: the client's stress mix (Start, Run, List, Info, Signal,
// Cancel racing Start, Attach, observers that never read, Output left
// mid-stream, session execs, background processes) from 8 goroutines
// against one sandbox; afterwards no process of the run survives, no
// zombie is left under runboxd, and runboxd's goroutines and descriptors
// are back at their baseline.
func testStress(t *testing.T, fx Fixture) {
	underLoad(t, fx, func(ctx context.Context, c *client.Client, m string) {
		ops := opsFrom(t, "RUNBOX_STRESS_OPS", loadStressOps)
		start := time.Now()
		for _, err := range (&loadmix.Stress{Client: c, Ops: ops, Marker: m}).Run(ctx) {
			t.Error(err)
		}
		t.Logf("%d operations in %v", ops, time.Since(start).Round(time.Millisecond))
	})
}

// testSoak: a short form of the soak benchmark (go run ./bench -only
// soak), the same mix of quick commands, timeouts, cancels racing starts,
// checksummed floods, background processes, PTY execs and observers that
// detach mid-stream: no call wedges or fails, no flood byte is lost, and
// afterwards nothing survives and runboxd is back at its baseline. It
// asserts the zeros, not times.
func testSoak(t *testing.T, fx Fixture) {
	underLoad(t, fx, func(ctx context.Context, c *client.Client, m string) {
		ops := opsFrom(t, "RUNBOX_SOAK_OPS", loadSoakOps)
		start := time.Now()
		counts := (&loadmix.Soak{Client: c, Ops: ops, Marker: m, FloodBytes: loadSoakFlood}).Run(ctx)
		t.Logf("%d commands in %v: %v", ops, time.Since(start).Round(time.Millisecond), counts.ByKind)
		for _, err := range counts.FirstErrors {
			t.Error(err)
		}
		if counts.Wedges != 0 || counts.Errors != 0 || counts.BytesLost != 0 {
			t.Errorf("%d wedges, %d errors, %d bytes lost; want none", counts.Wedges, counts.Errors, counts.BytesLost)
		}
	})
}

// underLoad runs load (given a client, and the marker digits of every
// sleep it starts) against a fresh sandbox of fx, bounded by loadBound,
// and checks what it leaves (afterLoad).
func underLoad(t *testing.T, fx Fixture, load func(ctx context.Context, c *client.Client, m string)) {
	skipUnlessLoad(t, fx)
	s := newSandbox(t, fx)
	probe, base := s.loadBaseline(t)
	m := strings.TrimPrefix(newMarker(), "sleep ")
	ctx, cancel := context.WithTimeout(context.Background(), loadBound)
	defer cancel()
	load(ctx, s.c, m)
	s.afterLoad(t, probe, base, "sleep "+m)
}

// loadBaseline warms the sandbox up and returns a probe client and
// runboxd's counters once they hold still. The load cases keep the default
// retention (a short one forgets an exec the mix still reads), so unlike
// baseline it does not wait for the retained execs to go.
func (s *sandbox) loadBaseline(t *testing.T) (*client.Client, runbox.DaemonInfo) {
	t.Helper()
	wantOK(t, s.exec(t, "echo warm"), "warm\n")
	probe := s.newClient(t)
	var prev, cur runbox.DaemonInfo
	poll(settleBound, func() bool {
		prev, cur = cur, s.info(t, probe)
		return cur.Running == 0 && cur.Goroutines == prev.Goroutines && cur.OpenFDs == prev.OpenFDs
	})
	t.Logf("daemon baseline: %d goroutines, %d open fds", cur.Goroutines, cur.OpenFDs)
	return probe, cur
}

// afterLoad checks what a load case leaves: no process carrying marker,
// no zombie under runboxd, nothing running, and runboxd's goroutines and
// descriptors back at base once the case's client is closed (retained
// execs hold neither).
func (s *sandbox) afterLoad(t *testing.T, probe *client.Client, base runbox.DaemonInfo, marker string) {
	t.Helper()
	s.noSurvivors(t, marker)
	var z int
	if !poll(settleBound, func() bool { z = s.fx.Zombies(t, s.sb); return z == 0 }) {
		t.Errorf("%d zombie(s) under runboxd after the load", z)
	}
	s.closeClient(s.c)
	var cur runbox.DaemonInfo
	if !poll(settleBound, func() bool {
		cur = s.info(t, probe)
		return cur.Running == 0 && cur.Goroutines <= base.Goroutines && cur.OpenFDs <= base.OpenFDs
	}) {
		t.Errorf("daemon did not return to baseline within %v: goroutines %d (baseline %d), open fds %d (baseline %d), running %d",
			settleBound, cur.Goroutines, base.Goroutines, cur.OpenFDs, base.OpenFDs, cur.Running)
	}
	t.Logf("after the load: %d goroutines, %d open fds, %d execs retained, %d total", cur.Goroutines, cur.OpenFDs, cur.Retained, cur.Total)
}
