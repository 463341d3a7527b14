package providertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
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
	m := newMarker()
	res := s.runWatched(t, m+" & "+m, m, 2, client.WithTimeout(time.Second))
	if !res.TimedOut || res.ExitCode != 143 {
		t.Errorf("%s & %s with 1s timeout: %s; want timed_out, exit 143", m, m, describe(res))
	}
	s.noSurvivors(t, m)
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
	m := newMarker()
	cmd := fmt.Sprintf("setsid %[1]s & (setsid sh -c '%[1]s &' &); nohup %[1]s >/dev/null 2>&1 & disown; %[1]s", m)
	// Four sleeps: setsid's, the double-forked one, nohup's and the leader's.
	res := s.runWatched(t, cmd, m, 4, client.WithTimeout(2*time.Second))
	if !res.TimedOut || res.ExitCode != 143 {
		t.Errorf("escapees with 2s timeout: %s; want timed_out, exit 143", describe(res))
	}
	if res.Killed < 4 {
		t.Errorf("result says the stop protocol signalled %d processes, want at least the 4 sleeps", res.Killed)
	}
	if res.Survivors != 0 {
		t.Errorf("result reports %d survivors", res.Survivors)
	}
	s.noSurvivors(t, m)
}

// testTermIgnored: a tree that ignores SIGTERM is killed after the grace.
func testTermIgnored(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	m := newMarker()
	const timeout, grace = time.Second, 500 * time.Millisecond
	res := s.runWatched(t, "trap '' TERM; "+m+" & "+m, m, 2, client.WithTimeout(timeout), client.WithGrace(grace))
	if !res.TimedOut || res.ExitCode != 137 || res.Signal != "KILL" {
		t.Errorf("TERM-ignoring command: %s; want timed_out, exit 137, signal KILL", describe(res))
	}
	// The grace is a lower bound on when SIGKILL may come; 100 ms of slack
	// for where the daemon starts its clock.
	if res.Duration < timeout+grace-100*time.Millisecond {
		t.Errorf("killed after %v, before timeout %v + grace %v: the grace was not honoured", res.Duration, timeout, grace)
	}
	s.noSurvivors(t, m)
}

// testZeroDelayCancel races Start against Cancel with random delays, in both
// orders, hundreds of times.
func testZeroDelayCancel(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx, "--retention=200ms")
	probe, base := s.baseline(t)
	m := newMarker()

	const rounds, workers = 500, 4
	var (
		mu                               sync.Mutex
		neverStarted, cancelled143, k137 int
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan string, rounds)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				outcome, msg := zeroDelayRound(s.c, m, i)
				if msg != "" {
					errs <- msg
					continue
				}
				mu.Lock()
				switch outcome {
				case 0:
					neverStarted++
				case 143:
					cancelled143++
				case 137:
					k137++
				}
				mu.Unlock()
			}
		})
	}
	for i := range rounds {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	n := 0
	for msg := range errs {
		if n++; n <= 10 {
			t.Error(msg)
		}
	}
	if n > 10 {
		t.Errorf("... and %d more failed rounds", n-10)
	}
	t.Logf("%d rounds: %d refused as never started, %d stopped with 143, %d with 137", rounds, neverStarted, cancelled143, k137)
	// The case exists for the race between the two orders: both must have
	// happened, or it tested one path only.
	if n == 0 && (neverStarted == 0 || cancelled143+k137 == 0) {
		t.Errorf("over %d rounds with random delays, %d execs were refused before they started and %d were stopped after: want both outcomes",
			rounds, neverStarted, cancelled143+k137)
	}
	s.noSurvivors(t, m)
	s.closeClient(s.c)
	s.expectSettled(t, probe, base)
}

// zeroDelayRound runs one Start/Cancel race and returns how the exec ended
// (0 never started, or its exit code) or a failure message.
func zeroDelayRound(c *client.Client, marker string, i int) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := newID(fmt.Sprintf("zdc%d", i))
	startDelay := time.Duration(mrand.IntN(5001)) * time.Microsecond
	cancelDelay := time.Duration(mrand.IntN(5001)) * time.Microsecond

	var (
		wg        sync.WaitGroup
		cancelErr error
		startErr  error
		waitErr   error
		res       runbox.Result
	)
	wg.Go(func() {
		time.Sleep(cancelDelay)
		cancelErr = c.Cancel(ctx, id, 0)
	})
	wg.Go(func() {
		time.Sleep(startDelay)
		var p *client.Process
		p, startErr = c.Start(ctx, marker, client.WithID(id))
		if startErr == nil {
			res, waitErr = p.Wait(ctx)
		}
	})
	wg.Wait()
	where := fmt.Sprintf("round %d (exec %s, start after %v, cancel after %v)", i, id, startDelay, cancelDelay)
	if cancelErr != nil {
		return 0, fmt.Sprintf("%s: cancel: %v", where, cancelErr)
	}
	if startErr != nil {
		if !errors.Is(startErr, runbox.ErrCancelled) {
			return 0, fmt.Sprintf("%s: start: %v; want success or ErrCancelled", where, startErr)
		}
		return 0, ""
	}
	if waitErr != nil {
		return 0, fmt.Sprintf("%s: wait: %v", where, waitErr)
	}
	if !res.Cancelled || (res.ExitCode != 143 && res.ExitCode != 137) {
		return 0, fmt.Sprintf("%s: %s; want cancelled with exit 143 or 137", where, describe(res))
	}
	return res.ExitCode, ""
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

// testOutputSeparate: stdout and stderr stay apart and byte-exact, streamed
// and in the result, with sequence numbers across both.
func testOutputSeparate(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	var so, se bytes.Buffer
	res := s.exec(t, `printf 'out1\n'; printf 'err1\n' >&2; printf 'out2'; printf 'err2' >&2; printf '\377\000\r\n' >&2`,
		client.WithStdout(&so), client.WithStderr(&se))
	wantOut, wantErr := "out1\nout2", "err1\nerr2\xff\x00\r\n"
	if string(res.Stdout) != wantOut || string(res.Stderr) != wantErr || res.ExitCode != 0 {
		t.Errorf("result: %s; want stdout %q, stderr %q", describe(res), wantOut, wantErr)
	}
	if so.String() != wantOut || se.String() != wantErr {
		t.Errorf("streamed stdout %q, stderr %q; want %q, %q", so.String(), se.String(), wantOut, wantErr)
	}
	if res.StdoutBytes != int64(len(wantOut)) || res.StderrBytes != int64(len(wantErr)) || res.StdoutDropped != 0 || res.StderrDropped != 0 {
		t.Errorf("byte counts: stdout %d dropped %d, stderr %d dropped %d; want %d, 0, %d, 0",
			res.StdoutBytes, res.StdoutDropped, res.StderrBytes, res.StderrDropped, len(wantOut), len(wantErr))
	}

	wantOK(t, s.exec(t, "printf 'no trailing newline'"), "no trailing newline")

	var chunks []runbox.Chunk
	res = s.exec(t, `for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done`,
		client.WithOnChunk(func(c runbox.Chunk) {
			c.Data = append([]byte(nil), c.Data...)
			chunks = append(chunks, c)
		}))
	var streams [3]bytes.Buffer
	var last uint64
	for _, c := range chunks {
		if c.Seq <= last {
			t.Errorf("chunk seq %d after %d: sequence numbers must increase", c.Seq, last)
		}
		last = c.Seq
		if c.Stream != runbox.Stdout && c.Stream != runbox.Stderr {
			t.Fatalf("chunk %d has stream %v", c.Seq, c.Stream)
		}
		streams[c.Stream].Write(c.Data)
	}
	if streams[runbox.Stdout].String() != "out1\nout2\nout3\n" || streams[runbox.Stderr].String() != "err1\nerr2\nerr3\n" {
		t.Errorf("chunks: stdout %q stderr %q", streams[runbox.Stdout].String(), streams[runbox.Stderr].String())
	}
	if string(res.Stdout) != "out1\nout2\nout3\n" || string(res.Stderr) != "err1\nerr2\nerr3\n" {
		t.Errorf("result with chunk callback: %s", describe(res))
	}
}

// binaryOutput returns a command that writes total bytes of binary output
// built from seed (which it reads from stdin), and the bytes it writes. The
// seed's first 256 bytes are every byte value, the rest random; its length
// is prime, so its repetitions never line up with power-of-two chunk
// boundaries and a lost, doubled or reordered chunk shows.
func binaryOutput(total int) (command string, seed, want []byte) {
	const seedLen = 65521
	seed = make([]byte, seedLen)
	for i := range 256 {
		seed[i] = byte(i)
	}
	rng := mrand.NewChaCha8([32]byte{'r', 'u', 'n', 'b', 'o', 'x'})
	rng.Read(seed[256:])
	want = bytes.Repeat(seed, total/seedLen+1)[:total]
	command = fmt.Sprintf(`f=%s; cat > $f; i=0; while [ $i -lt %d ]; do cat $f; i=$((i+1)); done | head -c %d; rm -f $f`,
		tempPath("binary"), total/seedLen+1, total)
	return command, seed, want
}

// testOutputBinary: 10 MB of binary output with every byte value arrives
// byte-exact, streamed and in the result, and the default result keeps its
// exact head and tail.
func testOutputBinary(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total = 10_000_000
	cmd, seed, want := binaryOutput(total)

	var streamed bytes.Buffer
	res := s.exec(t, cmd, client.WithStdin(seed), client.WithStdout(&streamed), client.WithOutputLimits(16<<20, 16<<20))
	if res.ExitCode != 0 || len(res.Stderr) != 0 {
		t.Fatalf("binary output: %s", describe(res))
	}
	sameBytes(t, "streamed stdout", streamed.Bytes(), want)
	sameBytes(t, "result stdout (16 MiB limits)", res.Stdout, want)
	if res.StdoutBytes != total || res.StdoutDropped != 0 {
		t.Errorf("stdout bytes %d dropped %d; want %d, 0", res.StdoutBytes, res.StdoutDropped, total)
	}

	cmd, seed, want = binaryOutput(total)
	res = s.exec(t, cmd, client.WithStdin(seed))
	const head, tail = 32 << 10, 32 << 10
	if res.ExitCode != 0 {
		t.Fatalf("binary output, default limits: %s", describe(res))
	}
	sameBytes(t, "result stdout (default head+tail)", res.Stdout, append(want[:head:head], want[total-tail:]...))
	if res.StdoutBytes != total || res.StdoutDropped != total-head-tail {
		t.Errorf("stdout bytes %d dropped %d; want %d, %d", res.StdoutBytes, res.StdoutDropped, total, total-head-tail)
	}
}

// testOutputSlowReader: a client that consumes streamed output more slowly
// than the command writes it still gets every byte, because the command's
// output waits for it (flow control) instead of dropping what it has not
// read. 10 MB outruns every buffer on the way (the pipe, the replay ring, the
// transport's windows), so when the command exits the client is megabytes
// behind, and the output still in flight must not be evicted from under it.
func testOutputSlowReader(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total = 10_000_000
	cmd, seed, want := binaryOutput(total)
	w := &slowWriter{perByte: time.Second / (1 << 20)} // 1 MiB/s
	res := s.exec(t, cmd, client.WithStdin(seed), client.WithStdout(w))
	if res.ExitCode != 0 || res.StdoutBytes != total {
		t.Fatalf("binary output to a slow reader: %s, %d bytes", describe(res), res.StdoutBytes)
	}
	if res.StreamGaps != 0 || res.StreamLost != 0 {
		t.Errorf("a connected slow reader saw %d gaps (%d bytes lost)", res.StreamGaps, res.StreamLost)
	}
	// The daemon read every byte (StdoutBytes); each must reach the client.
	sameBytes(t, fmt.Sprintf("stdout streamed to a slow reader (result counts %d bytes)", res.StdoutBytes), w.buf.Bytes(), want)
}

// testOutputGapReported: attaching after the replay ring has moved on (the
// only way a stream can miss output) is reported, never silent: the result
// counts the gap and its bytes exactly, and the streamed bytes plus the lost
// ones are the whole output.
func testOutputGapReported(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total = 3 << 20 // three times the default ring
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	p, err := s.c.Start(ctx, fmt.Sprintf("head -c %d /dev/zero", total))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if res, err := p.Wait(ctx); err != nil || res.StdoutBytes != total {
		t.Fatalf("wait: %v, %d bytes", err, res.StdoutBytes)
	}
	var streamed countWriter
	var gaps []runbox.OutputGap
	res, err := s.c.Attach(ctx, p.ID(), client.WithStdout(&streamed),
		client.WithOnGap(func(g runbox.OutputGap) { gaps = append(gaps, g) }))
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if res.StreamGaps != 1 || len(gaps) != 1 || gaps[0].FromSeq != 1 {
		t.Fatalf("attach after the ring moved on: %d gaps reported (%+v), want one from seq 1", res.StreamGaps, gaps)
	}
	if res.StreamLost == 0 || int64(streamed)+res.StreamLost != total {
		t.Errorf("streamed %d + lost %d bytes, want %d in all", streamed, res.StreamLost, total)
	}
}

// countWriter counts the bytes written to it.
type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}

// slowWriter is an io.Writer that takes perByte for each byte written.
type slowWriter struct {
	perByte time.Duration
	buf     bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Duration(len(p)) * w.perByte)
	return w.buf.Write(p)
}

// testOutputHuge: 1 GB of output keeps the daemon's memory bounded and the
// result counts what it dropped exactly.
func testOutputHuge(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const (
		total   = 1_000_000_000
		head    = 32 << 10
		tail    = 32 << 10
		line    = "abcdefghi\n"
		rssKeep = 200 << 20
	)
	var rss0 int64
	if fx.DaemonRSS != nil {
		rss0 = fx.DaemonRSS(t, s.sb)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
		defer cancel()
		res, err := s.c.Exec(ctx, fmt.Sprintf("yes %s | head -c %d", strings.TrimSuffix(line, "\n"), total))
		done <- outcome{res, err}
	}()
	var (
		o       outcome
		maxRSS  int64
		samples int
	)
sample:
	for {
		select {
		case o = <-done:
			break sample
		case <-time.After(50 * time.Millisecond):
			if fx.DaemonRSS != nil {
				maxRSS = max(maxRSS, fx.DaemonRSS(t, s.sb))
				samples++
			}
		}
	}
	if o.err != nil {
		t.Fatalf("1 GB output: %v", o.err)
	}
	res := o.res
	if res.ExitCode != 0 {
		t.Errorf("1 GB output: %s", describe(res))
	}
	if res.StdoutBytes != total || res.StdoutDropped != total-head-tail {
		t.Errorf("stdout bytes %d dropped %d; want %d, %d", res.StdoutBytes, res.StdoutDropped, total, total-head-tail)
	}
	at := func(off int) byte { return line[off%len(line)] }
	want := make([]byte, 0, head+tail)
	for i := range head {
		want = append(want, at(i))
	}
	for i := total - tail; i < total; i++ {
		want = append(want, at(i))
	}
	sameBytes(t, "result stdout", res.Stdout, want)
	if fx.DaemonRSS == nil {
		t.Log("fixture has no DaemonRSS: memory bound not checked")
		return
	}
	t.Logf("daemon RSS %d MiB before, at most %d MiB in %d samples during 1 GB of output", rss0>>20, maxRSS>>20, samples)
	if samples == 0 {
		t.Errorf("no RSS sample taken during the exec")
	}
	if maxRSS > rssKeep {
		t.Errorf("daemon RSS reached %d MiB during 1 GB of output, want under %d MiB", maxRSS>>20, rssKeep>>20)
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

// runWatched starts command, waits until at least want processes carrying
// marker are alive (so the case tests what it claims), then waits for the
// result.
func (s *sandbox) runWatched(t *testing.T, command, marker string, want int, opts ...client.ExecOption) runbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	p, err := s.c.Start(ctx, command, opts...)
	if err != nil {
		t.Fatalf("start %q: %v", command, err)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.Wait(ctx)
		done <- outcome{res, err}
	}()
	seen := 0
	var o outcome
	for finished := false; !finished; {
		select {
		case o = <-done:
			finished = true
		default:
			if seen < want {
				seen = max(seen, s.count(t, marker))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if o.err != nil {
		t.Fatalf("wait for %q: %v", command, o.err)
	}
	if seen < want {
		t.Errorf("saw at most %d processes with %q while %q ran, want %d: the case did not set up what it tests", seen, marker, command, want)
	}
	return o.res
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

// testForkBombBesideServing: while a fork bomb holds every process its pids
// limit allows, other clients keep asking for commands. runboxd needs
// threads of its own to serve them, and the Go runtime aborts the whole
// process when it cannot make one: the limit must leave runboxd room. The
// other commands may fail to fork, clearly; the sandbox is never lost, the
// bomb leaves no survivor, and the sandbox serves at once afterwards.
func testForkBombBesideServing(t *testing.T, fx Fixture) {
	if !fx.PidsLimit {
		skipNoLimit(t, fx, "pids")
	}
	spec := fx.Spec
	spec.Pids = 64
	s := newSandboxSpec(t, fx, spec)
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
		bombDone := make(chan struct{})
		var clients sync.WaitGroup
		for i := range 12 {
			clients.Go(func() {
				for j := 0; ; j++ {
					select {
					case <-bombDone:
						return
					default:
					}
					_, err := s.c.Exec(ctx, fmt.Sprintf("echo %d; sleep 0.0%d", i, j%10), client.WithTimeout(2*time.Second))
					if errors.Is(err, runbox.ErrSandboxLost) {
						t.Errorf("round %d: a command beside the fork bomb: %v", round, err)
						return
					}
				}
			})
		}
		m := newMarker()
		res, err := s.c.Exec(ctx, ": "+m+"; f(){ f|f& }; f; sleep 60", client.WithTimeout(3*time.Second), client.WithGrace(time.Second))
		close(bombDone)
		clients.Wait()
		cancel()
		if err != nil {
			t.Fatalf("round %d: fork bomb: %v", round, err)
		}
		if !res.TimedOut {
			t.Errorf("round %d: fork bomb with a 3s timeout: %s, want timed out", round, describe(res))
		}
		s.noSurvivors(t, m)
		// The sandbox serves again: the timeout only bounds a hang (the
		// claim is that it works, not how fast on a loaded machine).
		wantOK(t, s.exec(t, "echo ok", client.WithTimeout(time.Minute)), "ok\n")
	}
}

// testOOMKillerSparesDaemon: when the memory limit is reached by many
// processes, each smaller than runboxd, the OOM killer kills some of them
// and never runboxd.
func testOOMKillerSparesDaemon(t *testing.T, fx Fixture) {
	if !fx.MemoryLimit {
		skipNoLimit(t, fx, "memory")
	}
	spec := fx.Spec
	spec.Memory = 128 << 20
	s := newSandboxSpec(t, fx, spec)
	before := s.info(t, s.c)
	// 60 subshells of about 6 MiB each (a 3 MB string, and its copy in
	// the making) need far more than 128 MiB.
	res := s.exec(t, `pids=; for i in $(seq 60); do ( x=$(head -c 3000000 /dev/zero | tr '\0' b); sleep 2 ) & pids="$pids $!"; done
k=0; for p in $pids; do wait $p || k=$((k+1)); done; echo killed $k`, client.WithTimeout(time.Minute))
	// The OOM killer takes hogs, each reported by the waiting shell; or,
	// when that shell is the largest command at its moment (also at
	// oom_score_adj 1000, like every command), the shell itself, and the
	// exec ends by SIGKILL with its OOM kill recorded. Either way commands
	// died, and (below) runboxd did not.
	var killed int
	_, serr := fmt.Sscanf(string(res.Stdout), "killed %d", &killed)
	hogsKilled := serr == nil && res.ExitCode == 0 && killed > 0
	shellKilled := res.ExitCode == 137 && res.OOMKilled
	if !hogsKilled && !shellKilled {
		t.Errorf("60 small hogs under 128 MiB: %s, want some of them (or their shell) killed by the OOM killer", describe(res))
	}
	after := s.info(t, s.c)
	if after.Pid != before.Pid || !after.StartedAt.Equal(before.StartedAt) {
		t.Errorf("runboxd changed from pid %d to pid %d: the OOM killer chose it", before.Pid, after.Pid)
	}
	wantOK(t, s.exec(t, "echo ok"), "ok\n")
}

// skipNoLimit skips a case that needs the provider's limit of kind.
func skipNoLimit(t *testing.T, fx Fixture, kind string) {
	t.Helper()
	if fx.NoLimitsReason != "" {
		t.Skipf("no %s limit here: %s", kind, fx.NoLimitsReason)
	}
	t.Skipf("the provider has no %s limit", kind)
}
