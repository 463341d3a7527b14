package providertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// cases is the suite: the acceptance lists of the core issue and of the
// agent shell semantics issue, one behaviour per case. Heavy cases (many
// execs, large output) run one at a time so the liveness bounds of the light
// ones are not measured on a saturated machine.
func cases() []testCase {
	return append([]testCase{
		{name: "Wedge", run: testWedge},
		{name: "TimeoutKillsBackground", run: testTimeoutKillsBackground},
		{name: "EscapeesCgroup", run: func(t *testing.T, fx Fixture) { testEscapees(t, fx, "cgroup2") }},
		{name: "EscapeesProc", run: func(t *testing.T, fx Fixture) { testEscapees(t, fx, "proc") }},
		{name: "TermIgnored", run: testTermIgnored},
		{name: "ZeroDelayCancel", run: testZeroDelayCancel, heavy: true},
		{name: "CancelBeforeStart", run: testCancelBeforeStart},
		{name: "ExitCodes", run: testExitCodes},
		{name: "OutputSeparate", run: testOutputSeparate},
		{name: "OutputBinary", run: testOutputBinary, heavy: true},
		{name: "OutputSlowReader", run: testOutputSlowReader},
		{name: "OutputGapReported", run: testOutputGapReported},
		{name: "OutputHuge", run: testOutputHuge, heavy: true},
		{name: "Stdin", run: testStdin},
		{name: "BackgroundOutlivesExec", run: testBackgroundOutlivesExec},
		{name: "ConnectionDropped", run: testConnectionDropped},
		{name: "TimeoutIsTimedOut", run: testTimeoutIsTimedOut},
		{name: "DaemonKilled", run: testDaemonKilled},
		{name: "SequentialExecsNoLeak", run: testSequentialExecsNoLeak, heavy: true},
		{name: "NoZombies", run: testNoZombies},
		{name: "ForkBombBesideServing", run: testForkBombBesideServing, heavy: true},
		{name: "OOMKillerSparesDaemon", run: testOOMKillerSparesDaemon, heavy: true},
		{name: "StarvedStillAnswers", run: testStarvedStillAnswers, heavy: true},
		{name: "LoopbackListener", run: testLoopbackListener},
		{name: "PortForward", run: testPortForward},
		{name: "AttachReplay", run: testAttachReplay},
		{name: "GitNoPrompt", run: testGitNoPrompt},
		{name: "SpillThroughClient", run: testSpillThroughClient},
	}, append(append(append(append(filesCases(), authCases()...), inputCases()...), documentedCases()...), loadCases()...)...)
}

// testWedge: a timed-out command leaves the sandbox serving the next one.
func testWedge(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	m := newMarker()
	before := s.info(t, s.c)

	wantOK(t, s.exec(t, "echo ok"), "ok\n")
	res := s.exec(t, m, client.WithTimeout(time.Second))
	if !res.TimedOut || res.ExitCode != 143 || res.Signal != "TERM" {
		t.Errorf("%s with 1s timeout: %s; want timed_out, exit 143, signal TERM", m, describe(res))
	}
	s.noSurvivors(t, m)
	wantOK(t, s.exec(t, "echo ok"), "ok\n")

	after := s.info(t, s.c)
	if after.Pid != before.Pid || !after.StartedAt.Equal(before.StartedAt) {
		t.Errorf("runboxd changed from pid %d (started %v) to pid %d (started %v): the sandbox went away",
			before.Pid, before.StartedAt, after.Pid, after.StartedAt)
	}
}

// testTimeoutKillsBackground: a timeout kills the background job too.
func testTimeoutKillsBackground(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	w := s.runWatched(t, 2, time.Second, func(m string) string { return m + " & " + m }, timeoutOf)
	if res := w.res; !res.TimedOut || res.ExitCode != 143 {
		t.Errorf("%s & %s with a %v timeout: %s; want timed_out, exit 143", w.marker, w.marker, w.window, describe(res))
	}
	s.noSurvivors(t, w.marker)
}

// testEscapees: processes that left the exec's process group (setsid, double
// fork, nohup + disown) die with it, on the cgroup path and on the /proc
// fallback.
func testEscapees(t *testing.T, fx Fixture, mode string) {
	var args []string
	if mode == "proc" {
		args = []string{"--cgroup=off"}
	}
	s := newSandbox(t, fx, args...)
	if got := s.info(t, s.c).CgroupMode; got != mode {
		if mode == "cgroup2" && got == "proc" && !fx.RequireCgroup2 {
			t.Skipf("runboxd runs in %q mode: no writable cgroup v2 hierarchy in this sandbox (Fixture.RequireCgroup2 makes this a failure)", got)
		}
		t.Fatalf("runboxd %v reports cgroup mode %q, want %q", args, got, mode)
	}
	escapees := func(m string) string {
		return fmt.Sprintf("setsid %[1]s & (setsid sh -c '%[1]s &' &); nohup %[1]s >/dev/null 2>&1 & disown; %[1]s", m)
	}
	// Four sleeps: setsid's, the double-forked one, nohup's and the leader's.
	w := s.runWatched(t, 4, 2*time.Second, escapees, timeoutOf)
	res := w.res
	if !res.TimedOut || res.ExitCode != 143 {
		t.Errorf("escapees with a %v timeout: %s; want timed_out, exit 143", w.window, describe(res))
	}
	if res.Killed < 4 {
		t.Errorf("result says the stop protocol signalled %d processes, want at least the 4 sleeps", res.Killed)
	}
	if res.Survivors != 0 {
		t.Errorf("result reports %d survivors", res.Survivors)
	}
	s.noSurvivors(t, w.marker)
}

// testTermIgnored: a tree that ignores SIGTERM is killed after the grace.
func testTermIgnored(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const grace = 500 * time.Millisecond
	w := s.runWatched(t, 2, time.Second, func(m string) string { return "trap '' TERM; " + m + " & " + m },
		func(timeout time.Duration) []client.ExecOption {
			return []client.ExecOption{client.WithTimeout(timeout), client.WithGrace(grace)}
		})
	res := w.res
	if !res.TimedOut || res.ExitCode != 137 || res.Signal != "KILL" {
		t.Errorf("TERM-ignoring command: %s; want timed_out, exit 137, signal KILL", describe(res))
	}
	// The grace is a lower bound on when SIGKILL may come; 100 ms of slack
	// for where the daemon starts its clock.
	if res.Duration < w.window+grace-100*time.Millisecond {
		t.Errorf("killed after %v, before timeout %v + grace %v: the grace was not honoured", res.Duration, w.window, grace)
	}
	s.noSurvivors(t, w.marker)
}

// testCancelBeforeStart: a cancelled id is refused later, and nothing runs.
func testCancelBeforeStart(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := tempPath("cancel-before-start")

	id := newID("cbs")
	if err := s.c.Cancel(ctx, id, 0); err != nil {
		t.Fatalf("cancel unknown exec %s: %v; want a tombstone and no error", id, err)
	}
	res, err := s.c.Exec(ctx, "touch "+f, client.WithID(id))
	if !errors.Is(err, runbox.ErrCancelled) {
		t.Errorf("exec with cancelled id %s: result %s, err %v; want ErrCancelled", id, describe(res), err)
	}

	id2 := newID("cbs")
	if err := s.c.Cancel(ctx, id2, 0); err != nil {
		t.Fatalf("cancel unknown exec %s: %v", id2, err)
	}
	if p, err := s.c.Start(ctx, "touch "+f, client.WithID(id2)); !errors.Is(err, runbox.ErrCancelled) {
		t.Errorf("start with cancelled id %s: process %v, err %v; want ErrCancelled", id2, p, err)
	}

	wantOK(t, s.exec(t, fmt.Sprintf("if [ -e %[1]s ]; then echo ran; rm -f %[1]s; else echo absent; fi", f)), "absent\n")
}

// testExitCodes: exit statuses come back exact, and a signal death is 128+N.
func testExitCodes(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	for _, code := range []int{0, 1, 3, 42, 255} {
		res := s.exec(t, fmt.Sprintf("exit %d", code))
		if res.ExitCode != code || res.Signal != "" || res.TimedOut || res.Cancelled || res.IdleTimedOut {
			t.Errorf("exit %d: %s", code, describe(res))
		}
		if res.OK() != (code == 0) {
			t.Errorf("exit %d: OK() = %v", code, res.OK())
		}
	}
	res := s.exec(t, "kill -9 $$")
	if res.ExitCode != 137 || res.Signal != "KILL" || res.TimedOut || res.Cancelled {
		t.Errorf("kill -9 $$: %s; want exit 137, signal KILL", describe(res))
	}
}

// testStdin: stdin is closed by default; given bytes arrive exactly.
func testStdin(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	res := s.exec(t, "cat", client.WithTimeout(30*time.Second))
	if res.TimedOut || res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Errorf("cat without stdin: %s; want exit 0, empty output, at once", describe(res))
	}
	in := "line one\nline two\n\n\tindented $HOME `x` 'q'\nlast line without newline"
	res = s.exec(t, "cat", client.WithStdin([]byte(in)), client.WithTimeout(30*time.Second))
	if res.TimedOut || res.ExitCode != 0 || string(res.Stdout) != in {
		t.Errorf("cat with stdin: %s; want exit 0 and stdout %q", describe(res), in)
	}
}

// testBackgroundOutlivesExec: a command that leaves a background job returns
// promptly, the job keeps running, and removing the sandbox kills it.
func testBackgroundOutlivesExec(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	m := newMarker()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.c.Info(ctx); err != nil { // time the exec, not the first dial
		t.Fatalf("info: %v", err)
	}
	begin := time.Now()
	res, err := s.c.Exec(ctx, m+" & echo started")
	elapsed := time.Since(begin)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	wantOK(t, res, "started\n")
	if elapsed > backgroundBound {
		t.Errorf("returned after %v, want within %v", elapsed, backgroundBound)
	}
	if n := s.count(t, m); n != 1 {
		t.Errorf("%d processes with %q right after the exec returned, want the background sleep", n, m)
	}
	time.Sleep(300 * time.Millisecond)
	if n := s.count(t, m); n != 1 {
		t.Errorf("%d processes with %q 300ms after the exec returned, want the background sleep still running", n, m)
	}
	s.remove(t)
	if n := s.count(t, m); n != 0 {
		t.Errorf("%d processes with %q after the sandbox was removed", n, m)
	}
}

// testConnectionDropped: a connection broken mid-exec is re-dialled and the
// exec re-attached: output exactly once, the command run once.
func testConnectionDropped(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	var dials atomic.Int32
	base := fx.Provider.Dialer(s.sb)
	c := s.newClientDial(t, func(ctx context.Context) (net.Conn, error) {
		conn, err := base(ctx)
		if err != nil {
			return nil, err
		}
		if dials.Add(1) == 1 {
			time.AfterFunc(1500*time.Millisecond, func() { conn.Close() })
		}
		return conn, nil
	})
	f := tempPath("dropped")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var streamed bytes.Buffer
	res, err := c.Exec(ctx, fmt.Sprintf("for i in 1 2 3 4 5; do echo $i; echo $i >> %s; sleep 1; done", f),
		client.WithStdout(&streamed))
	if err != nil {
		t.Fatalf("exec across a dropped connection: %v", err)
	}
	const want = "1\n2\n3\n4\n5\n"
	wantOK(t, res, want)
	if streamed.String() != want {
		t.Errorf("streamed stdout %q, want %q exactly once", streamed.String(), want)
	}
	t.Logf("the client dialled %d times", dials.Load())
	if n := dials.Load(); n < 2 {
		t.Errorf("the client dialled %d time(s): the connection drop did not happen mid-exec", n)
	}
	wantOK(t, s.exec(t, fmt.Sprintf("cat %[1]s; rm -f %[1]s", f)), want)
}

// testTimeoutIsTimedOut: the daemon's timeout wins over any transport
// deadline, with or without a caller deadline.
func testTimeoutIsTimedOut(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	m := newMarker()

	res, err := s.c.Exec(context.Background(), m, client.WithTimeout(2*time.Second))
	if err != nil || !res.TimedOut || res.ExitCode != 143 {
		t.Errorf("2s timeout, no caller deadline: %s, err %v; want timed_out, exit 143, no error", describe(res), err)
	}
	s.noSurvivors(t, m)

	// A caller deadline past the timeout but short of timeout+grace.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	res, err = s.c.Exec(ctx, m, client.WithTimeout(2*time.Second))
	if err != nil || !res.TimedOut || res.ExitCode != 143 {
		t.Errorf("2s timeout, 4s caller deadline: %s, err %v; want timed_out, exit 143, no error", describe(res), err)
	}
	s.noSurvivors(t, m)

	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err = s.c.Exec(ctx, "trap '' TERM; "+m, client.WithTimeout(time.Second), client.WithGrace(time.Second))
	if err != nil || !res.TimedOut || res.ExitCode != 137 {
		t.Errorf("1s timeout, 1s grace, TERM ignored, 5s caller deadline: %s, err %v; want timed_out, exit 137, no error", describe(res), err)
	}
	s.noSurvivors(t, m)
}

// testDaemonKilled: a runboxd killed mid-exec is ErrSandboxLost naming the
// sandbox — never an exit code, never a hang.
func testDaemonKilled(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	type outcome struct {
		res runbox.Result
		err error
	}
	started := make(chan struct{})
	var once sync.Once
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The orphaned sleep outlives the daemon; keep it short.
		res, err := s.c.Exec(ctx, "echo up; sleep 5", client.WithOnChunk(func(runbox.Chunk) { once.Do(func() { close(started) }) }))
		done <- outcome{res, err}
	}()
	select {
	case <-started:
	case o := <-done:
		t.Fatalf("exec ended before the daemon was killed: %s, %v", describe(o.res), o.err)
	case <-time.After(time.Minute):
		t.Fatal("no output from the exec within a minute")
	}
	fx.KillDaemon(t, s.sb)
	killed := time.Now()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(time.Minute):
		t.Fatal("exec did not return within a minute of the daemon's death")
	}
	// How soon is logged, not asserted (the machine is shared and noisy);
	// that it is ErrSandboxLost at all, not a hang or an exit code, is the
	// claim.
	t.Logf("exec returned %v after runboxd was killed: %v", time.Since(killed), o.err)
	if !errors.Is(o.err, runbox.ErrSandboxLost) {
		t.Fatalf("exec after runboxd was killed: result %s, err %v; want ErrSandboxLost", describe(o.res), o.err)
	}
	var rerr *runbox.Error
	if !errors.As(o.err, &rerr) || rerr.Sandbox != s.sb.ID {
		t.Errorf("error %v does not name sandbox %s", o.err, s.sb.ID)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := s.c.Exec(ctx, "echo again"); !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("next exec on the dead sandbox: result %s, err %v; want ErrSandboxLost", describe(res), err)
	}
}

// testSequentialExecsNoLeak: after many execs the daemon's goroutines, open
// files and retained table return to their baseline.
func testSequentialExecsNoLeak(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx, "--retention=200ms")
	probe, base := s.baseline(t)
	const n = 1000
	for i := range n {
		res := s.exec(t, "true")
		if !res.OK() {
			t.Fatalf("exec %d of true: %s", i, describe(res))
		}
	}
	if info := s.info(t, probe); info.Total < n {
		t.Errorf("daemon counted %d execs, want at least %d", info.Total, n)
	}
	s.closeClient(s.c)
	s.expectSettled(t, probe, base)
}

// testNoZombies: orphans reparented to runboxd are reaped.
func testNoZombies(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	for i := range 50 {
		res := s.exec(t, "(sleep 0.1 &); sleep 0.3")
		if !res.OK() {
			t.Fatalf("run %d: %s", i, describe(res))
		}
	}
	var z int
	if !poll(2*time.Second, func() bool { z = fx.Zombies(t, s.sb); return z == 0 }) {
		t.Errorf("%d zombie(s) under runboxd after 50 runs of (sleep 0.1 &); sleep 0.3", z)
	}
}

// watchAttempts is how many times runWatched runs a command whose processes
// the case did not see alive, each time with twice the window before.
const watchAttempts = 4

// timeoutOf is the options of a run whose window is its timeout.
func timeoutOf(window time.Duration) []client.ExecOption {
	return []client.ExecOption{client.WithTimeout(window)}
}

// watched is one run of a command whose processes a case saw alive.
type watched struct {
	res    runbox.Result
	marker string        // what the run's processes carry on their command line
	window time.Duration // the time limit the run was given (a timeout, an idle timeout)
}

// runWatched runs command(marker) with opts(window) and returns its result
// once at least want processes carrying a fresh marker were seen alive
// while it ran, so the case tests what it claims. The observer looks from
// before the start to the result. On a loaded machine it can miss a
// short-lived tree: then each process of that run must still be gone (a
// time limit kills them whether or not anyone looked), and the command
// runs again with a new marker and twice the window; the case fails only
// when watchAttempts runs went unseen.
func (s *sandbox) runWatched(t *testing.T, want int, window time.Duration, command func(marker string) string, opts func(window time.Duration) []client.ExecOption) watched {
	t.Helper()
	for attempt := 1; ; attempt++ {
		m := newMarker()
		res, seen := s.watchOnce(t, command(m), m, want, opts(window)...)
		if seen >= want {
			return watched{res: res, marker: m, window: window}
		}
		s.noSurvivors(t, m)
		if attempt == watchAttempts {
			t.Fatalf("saw at most %d processes with %q while %q ran (the last of %d runs, with a time limit of %v), want %d: the case did not set up what it tests",
				seen, m, command(m), attempt, window, want)
		}
		t.Logf("saw at most %d of %d processes with %q while it ran with a time limit of %v: running it again with %v", seen, want, m, window, 2*window)
		window *= 2
	}
}

// watchOnce runs command once and returns its result and the most
// processes carrying marker seen alive at one look while it ran.
func (s *sandbox) watchOnce(t *testing.T, command, marker string, want int, opts ...client.ExecOption) (runbox.Result, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		p, err := s.c.Start(ctx, command, opts...)
		if err != nil {
			done <- outcome{err: fmt.Errorf("start %q: %w", command, err)}
			return
		}
		res, err := p.Wait(ctx)
		if err != nil {
			err = fmt.Errorf("wait for %q: %w", command, err)
		}
		done <- outcome{res, err}
	}()
	seen := 0
	for {
		select {
		case o := <-done:
			if o.err != nil {
				t.Fatal(o.err)
			}
			return o.res, seen
		default:
			if seen < want {
				seen = max(seen, s.count(t, marker))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// baseline warms the daemon up with one exec from a throwaway client, waits
// for its counters to come to rest, and returns a probe client with that
// resting state.
func (s *sandbox) baseline(t *testing.T) (*client.Client, runbox.DaemonInfo) {
	t.Helper()
	warm := s.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := warm.Exec(ctx, "true"); err != nil || !res.OK() {
		t.Fatalf("warm-up exec: %s, %v", describe(res), err)
	}
	s.closeClient(warm)
	probe := s.newClient(t)
	var prev, cur runbox.DaemonInfo
	poll(settleBound, func() bool {
		prev, cur = cur, s.info(t, probe)
		return cur.Retained == 0 && cur.Running == 0 &&
			cur.Goroutines == prev.Goroutines && cur.OpenFDs == prev.OpenFDs
	})
	t.Logf("daemon baseline: %d goroutines, %d open fds, %d retained", cur.Goroutines, cur.OpenFDs, cur.Retained)
	return probe, cur
}

// expectSettled polls until the daemon's goroutines and open files are back
// at base and no exec is retained, and fails the test if they never are.
func (s *sandbox) expectSettled(t *testing.T, probe *client.Client, base runbox.DaemonInfo) {
	t.Helper()
	var cur runbox.DaemonInfo
	if !poll(settleBound, func() bool {
		cur = s.info(t, probe)
		return cur.Retained == 0 && cur.Running == 0 &&
			cur.Goroutines <= base.Goroutines && cur.OpenFDs <= base.OpenFDs
	}) {
		t.Errorf("daemon did not return to baseline within %v: goroutines %d (baseline %d), open fds %d (baseline %d), retained %d, running %d",
			settleBound, cur.Goroutines, base.Goroutines, cur.OpenFDs, base.OpenFDs, cur.Retained, cur.Running)
	}
}

// wantOK checks that res exited 0 by itself with exactly stdout.
func wantOK(t *testing.T, res runbox.Result, stdout string) {
	t.Helper()
	if !res.OK() || string(res.Stdout) != stdout {
		t.Errorf("%s; want exit 0 and stdout %q", describe(res), stdout)
	}
}

// sameBytes reports where got first differs from want.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: %d bytes, want %d; first difference at offset %d", what, len(got), len(want), i)
}
