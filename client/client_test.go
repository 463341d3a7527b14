package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

func TestExecEcho(t *testing.T) {
	c := newClient(t)
	res, err := c.Exec(testCtx(t), "echo hi")
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || string(res.Stdout) != "hi\n" || res.StdoutBytes != 3 {
		t.Fatalf("result = %+v, want exit 0 and stdout %q", res, "hi\n")
	}
	if res.ID == "" || res.Pid == 0 {
		t.Errorf("result lacks id or pid: %+v", res)
	}
}

func TestExitCodeIsNotAnError(t *testing.T) {
	c := newClient(t)
	for _, code := range []int{1, 3, 127} {
		res, err := c.Exec(testCtx(t), "echo oops >&2; exit "+strconv.Itoa(code))
		if err != nil {
			t.Fatalf("exit %d: %v", code, err)
		}
		if res.ExitCode != code || res.OK() || string(res.Stderr) != "oops\n" {
			t.Errorf("exit %d: result = %+v", code, res)
		}
	}
}

func TestExecArgvAndOptions(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	res, err := c.ExecArgv(testCtx(t), []string{"sh", "-c", `printf '%s|%s|' "$FOO" "$PWD"; cat`},
		client.WithEnv("FOO", "bar"), client.WithCwd(dir), client.WithStdin([]byte("in")))
	if err != nil {
		t.Fatal(err)
	}
	if want := "bar|" + dir + "|in"; string(res.Stdout) != want {
		t.Errorf("stdout = %q, want %q", res.Stdout, want)
	}
}

func TestTimeoutIsAResult(t *testing.T) {
	c := newClient(t)
	res, err := c.Exec(testCtx(t), "sleep 30", client.WithTimeout(300*time.Millisecond), client.WithGrace(200*time.Millisecond))
	if err != nil {
		t.Fatalf("a timed-out exec must not be a transport error: %v", err)
	}
	if !res.TimedOut || res.ExitCode != 128+int(syscall.SIGTERM) || res.Killed == 0 {
		t.Errorf("result = %+v, want timed out, exit 143, killed > 0", res)
	}
}

func TestStreamsOutputAndReattachesAfterDroppedConnection(t *testing.T) {
	dial, dials := dialCounting(t, 1500*time.Millisecond)
	c := client.New(dial, client.WithSandboxName("test"))
	defer c.Close()

	var out, chunks bytes.Buffer
	var seqs []uint64
	res, err := c.Exec(testCtx(t), "for i in 1 2 3 4 5; do echo $i; sleep 1; done",
		client.WithStdout(&out),
		client.WithOnChunk(func(ch runbox.Chunk) { seqs = append(seqs, ch.Seq); chunks.Write(ch.Data) }))
	if err != nil {
		t.Fatal(err)
	}
	const want = "1\n2\n3\n4\n5\n"
	if out.String() != want || chunks.String() != want {
		t.Errorf("streamed %q (chunks %q), want %q exactly once", out.String(), chunks.String(), want)
	}
	if string(res.Stdout) != want || !res.OK() {
		t.Errorf("result = %+v", res)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Errorf("chunk seqs not increasing: %v", seqs)
		}
	}
	if n := dials(); n < 2 {
		t.Errorf("dialled %d times; the dropped connection was not replaced", n)
	}
	// The command ran once: one exec with this id, run once.
	infos, err := c.List(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, info := range infos {
		if info.ID == res.ID {
			n++
		}
	}
	if n != 1 {
		t.Errorf("daemon lists exec %s %d times", res.ID, n)
	}
}

func TestRunWithExistingIDAttaches(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	// What a re-issued Run relies on: the same id never runs twice.
	p, err := c.Start(ctx, "echo $$; sleep 0.3", client.WithID("attach-same-id"))
	if err != nil {
		t.Fatal(err)
	}
	// The id is an idempotency key: another command under it is refused.
	if _, err := c.Exec(ctx, "echo never", client.WithID("attach-same-id")); !errors.Is(err, runbox.ErrExecIDConflict) {
		t.Errorf("same id, another command: %v; want ErrExecIDConflict", err)
	}
	again, err := c.Exec(ctx, "echo $$; sleep 0.3", client.WithID("attach-same-id"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Stdout) != string(first.Stdout) || strings.Contains(string(again.Stdout), "never") {
		t.Errorf("second run = %q, first = %q: want the same exec", again.Stdout, first.Stdout)
	}
	if p.Pid() == 0 || p.ID() != "attach-same-id" {
		t.Errorf("process id %q pid %d", p.ID(), p.Pid())
	}
}

func TestCallerCancelCancelsTheExec(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	res, err := c.Exec(ctx, "sleep 30", client.WithGrace(200*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("caller cancel reported as lost sandbox: %v", err)
	}
	if !res.Cancelled || res.ID == "" {
		t.Errorf("result = %+v, want Cancelled", res)
	}
	// Cancelling before the exec exists leaves a tombstone: never runs.
	done, cancel2 := context.WithCancel(testCtx(t))
	cancel2()
	res, err = c.Exec(done, "echo must-not-run")
	if !errors.Is(err, context.Canceled) || !res.Cancelled || len(res.Stdout) != 0 {
		t.Errorf("exec with a cancelled ctx: %+v, %v", res, err)
	}
}

// TestCancelledContextNeverRuns gives Exec, Start and StartSpec a context
// that has already ended, many times: the command must never run (it would
// leave its file), not even a quick one that could finish before a cancel.
func TestCancelledContextNeverRuns(t *testing.T) {
	c := newClient(t)
	dir := t.TempDir()
	done, cancel := context.WithCancel(testCtx(t))
	cancel()
	for i := range 100 {
		marker := filepath.Join(dir, fmt.Sprintf("ran-%d", i))
		var err error
		switch i % 3 {
		case 0:
			var res runbox.Result
			res, err = c.Exec(done, "touch "+marker)
			if !res.Cancelled {
				t.Fatalf("run %d: %+v, want cancelled", i, res)
			}
		case 1:
			_, err = c.Start(done, "touch "+marker)
		case 2:
			_, err = c.StartSpec(done, runbox.ExecSpec{Argv: []string{"touch", marker}})
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: %v, want context.Canceled", i, err)
		}
	}
	// Each call returns only once its exec, had it started, has ended.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s exists: a command given an ended context ran", e.Name())
	}
}

func TestStartWaitAndStdinStream(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	p, err := c.Start(ctx, "cat; echo done >&2", client.WithStdinStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin(ctx, []byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteStdin(ctx, p.ID(), []byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello world" || string(res.Stderr) != "done\n" {
		t.Errorf("result = %+v", res)
	}
	again, err := p.Wait(ctx)
	if err != nil || again.ID != res.ID {
		t.Errorf("second Wait = %+v, %v", again, err)
	}
	if err := p.WriteStdin(ctx, []byte("late")); !errors.Is(err, runbox.ErrNotRunning) && !errors.Is(err, runbox.ErrExecNotFound) {
		t.Errorf("stdin after exit: %v, want ErrNotRunning", err)
	}
}

func TestProcessOutputAndAttach(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	p, err := c.Start(ctx, "echo a; echo b >&2; echo c")
	if err != nil {
		t.Fatal(err)
	}
	// stdout and stderr are separate pipes, so only the order within each
	// stream is defined.
	var streams [3]string
	for ch, err := range p.Output(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		streams[ch.Stream] += string(ch.Data)
	}
	if streams[runbox.Stdout] != "a\nc\n" || streams[runbox.Stderr] != "b\n" {
		t.Errorf("output: stdout %q stderr %q", streams[runbox.Stdout], streams[runbox.Stderr])
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// Attach after the end replays from the ring.
	var out, errOut bytes.Buffer
	var chunks []runbox.Chunk
	res, err := c.Attach(ctx, p.ID(), client.WithStdout(&out), client.WithStderr(&errOut),
		client.WithOnChunk(func(ch runbox.Chunk) { chunks = append(chunks, ch) }))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "a\nc\n" || errOut.String() != "b\n" || string(res.Stdout) != "a\nc\n" {
		t.Errorf("attach replayed stdout %q stderr %q, result %+v", out.String(), errOut.String(), res)
	}
	if len(chunks) == 0 {
		t.Fatal("attach replayed no chunks")
	}
	// From a sequence number: only what follows.
	last := chunks[len(chunks)-1]
	var tail []runbox.Chunk
	if _, err := c.Attach(ctx, p.ID(), client.WithFromSeq(last.Seq),
		client.WithOnChunk(func(ch runbox.Chunk) { tail = append(tail, ch) })); err != nil {
		t.Fatal(err)
	}
	if len(tail) != 1 || tail[0].Seq != last.Seq || string(tail[0].Data) != string(last.Data) {
		t.Errorf("attach from seq %d replayed %+v, want only %+v", last.Seq, tail, last)
	}
}

func TestCancelSignalListInfo(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	p, err := c.Start(ctx, "trap 'echo usr1' USR1; echo ready; while :; do sleep 0.05; done", client.WithGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// waitFor reads the exec's output until it has printed s.
	waitFor := func(s string) {
		t.Helper()
		var out strings.Builder
		for ch, err := range p.Output(ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			if out.WriteString(string(ch.Data)); strings.Contains(out.String(), s) {
				return
			}
		}
		t.Fatalf("the exec ended without printing %q: %q", s, out.String())
	}
	// Signal once the shell has installed its trap (it says so); it runs
	// the trap when its current sleep ends.
	waitFor("ready")
	if n, err := c.Signal(ctx, p.ID(), syscall.SIGUSR1); err != nil || n == 0 {
		t.Fatalf("signal: %d, %v", n, err)
	}
	waitFor("usr1")
	infos, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, info := range infos {
		if info.ID == p.ID() {
			found = true
			if info.State != runbox.ExecRunning || info.Pid != p.Pid() || info.StartedAt.IsZero() {
				t.Errorf("list entry = %+v", info)
			}
		}
	}
	if !found {
		t.Errorf("list lacks %s", p.ID())
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != "test" || info.Running == 0 || info.Pid == 0 || info.Goroutines == 0 {
		t.Errorf("info = %+v", info)
	}
	if err := p.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cancelled || !strings.Contains(string(res.Stdout), "usr1") {
		t.Errorf("result = %+v, want cancelled after printing usr1", res)
	}
	if err := c.Cancel(ctx, p.ID(), 0); err != nil {
		t.Errorf("second cancel: %v", err)
	}
}

func TestTypedErrors(t *testing.T) {
	c := newClient(t, client.WithSandboxName("sb1"))
	ctx := testCtx(t)

	_, err := c.ExecArgv(ctx, []string{"/nonexistent/runbox-no-such-binary"})
	assertOpError(t, err, runbox.ErrSpawn, "exec", "sb1")

	_, err = c.ExecSpec(ctx, runbox.ExecSpec{Command: "true", Argv: []string{"true"}})
	assertOpError(t, err, runbox.ErrInvalidSpec, "exec", "sb1")

	_, err = c.Attach(ctx, "no-such-exec")
	assertOpError(t, err, runbox.ErrExecNotFound, "attach", "sb1")

	if err := c.Cancel(ctx, "tombstoned", 0); err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, "echo must-not-run", client.WithID("tombstoned"))
	assertOpError(t, err, runbox.ErrCancelled, "exec", "sb1")

	res, err := c.Exec(ctx, "true")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Signal(ctx, res.ID, syscall.SIGTERM)
	assertOpError(t, err, runbox.ErrNotRunning, "signal", "sb1")
}

func assertOpError(t *testing.T, err, sentinel error, op, sandbox string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("err = %v, want %v", err, sentinel)
		return
	}
	re, ok := errors.AsType[*runbox.Error](err)
	if !ok || re.Op != op || re.Sandbox != sandbox {
		t.Errorf("err = %#v, want *runbox.Error{Op: %q, Sandbox: %q}", err, op, sandbox)
	}
	if errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("daemon answer reported as lost sandbox: %v", err)
	}
}

func TestUnreachableDaemonIsSandboxLost(t *testing.T) {
	c := client.DialUnix(filepath.Join(t.TempDir(), "missing.sock"),
		client.WithSandboxName("gone"), client.WithReconnectWindow(200*time.Millisecond))
	defer c.Close()
	ctx := testCtx(t)
	res, err := c.Exec(ctx, "echo hi")
	assertLost(t, err)
	if res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Errorf("a lost sandbox must not look like a result: %+v", res)
	}
	_, err = c.Info(ctx)
	assertLost(t, err)
	_, err = c.Attach(ctx, "x")
	assertLost(t, err)
}

func assertLost(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("err = %v, want ErrSandboxLost", err)
	}
	if re, ok := errors.AsType[*runbox.Error](err); !ok || re.Sandbox != "gone" {
		t.Errorf("err = %#v, want *runbox.Error naming sandbox gone", err)
	}
}

// dropAfterWriting closes a connection right after it has carried a write
// containing marker, once.
type dropAfterWriting struct {
	net.Conn
	marker  []byte
	dropped *atomic.Bool
}

func (c dropAfterWriting) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if bytes.Contains(p, c.marker) && c.dropped.CompareAndSwap(false, true) {
		c.Conn.Close()
	}
	return n, err
}

func TestRunReissuedAfterDropBeforeStarted(t *testing.T) {
	socket := socketPath(t)
	marker := "runbox-reissue-" + strconv.Itoa(os.Getpid())
	var dropped atomic.Bool
	c := client.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		return dropAfterWriting{conn, []byte(marker), &dropped}, nil
	})
	defer c.Close()

	runs := filepath.Join(t.TempDir(), "runs")
	res, err := c.Exec(testCtx(t), "echo run >> "+runs+"; sleep 0.2; echo out # "+marker)
	if err != nil {
		t.Fatal(err)
	}
	if !dropped.Load() {
		t.Fatal("the connection carrying the Run request was not dropped")
	}
	if string(res.Stdout) != "out\n" {
		t.Errorf("result = %+v", res)
	}
	got, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "run\n" {
		t.Errorf("command ran %d times, want exactly once", strings.Count(string(got), "run"))
	}
}

// freezingConn stops carrying anything once frozen, without closing: reads
// block and writes vanish, like a peer that disappeared off the network.
type freezingConn struct {
	net.Conn
	frozen    atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *freezingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.frozen.Load() {
		<-c.closed
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *freezingConn) Write(p []byte) (int, error) {
	if c.frozen.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *freezingConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func TestHalfDeadConnectionIsNoticed(t *testing.T) {
	socket := socketPath(t)
	var first atomic.Pointer[freezingConn]
	c := client.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		fc := &freezingConn{Conn: conn, closed: make(chan struct{})}
		first.CompareAndSwap(nil, fc)
		return fc, nil
	}, client.WithPingTimeouts(200*time.Millisecond, 300*time.Millisecond))
	defer c.Close()

	freeze := time.AfterFunc(1500*time.Millisecond, func() { first.Load().frozen.Store(true) })
	defer freeze.Stop()
	var out bytes.Buffer
	res, err := c.Exec(testCtx(t), "for i in 1 2 3 4 5; do echo $i; sleep 1; done", client.WithStdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	if !first.Load().frozen.Load() {
		t.Fatal("the connection never froze")
	}
	const want = "1\n2\n3\n4\n5\n"
	if out.String() != want || string(res.Stdout) != want {
		t.Errorf("streamed %q, result %q; want %q exactly once", out.String(), res.Stdout, want)
	}
}

// TestListWithoutOutput: List carries every retained result's output
// unless asked not to; without it, the result still says how the exec
// ended (exit code, dropped bytes) with empty stdout and stderr.
func TestListWithoutOutput(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	const n = 48 << 10
	res, err := c.Exec(ctx, fmt.Sprintf("head -c %d /dev/zero | tr '\\0' o; head -c %d /dev/zero | tr '\\0' e >&2; exit 7", n, n))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || len(res.Stdout) != n || len(res.Stderr) != n {
		t.Fatalf("the exec gave exit %d, %d and %d bytes; want 7, %d and %d", res.ExitCode, len(res.Stdout), len(res.Stderr), n, n)
	}
	find := func(opts ...client.ListOption) runbox.ExecInfo {
		t.Helper()
		infos, err := c.List(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			if info.ID == res.ID {
				return info
			}
		}
		t.Fatalf("list lacks %s", res.ID)
		return runbox.ExecInfo{}
	}
	full := find()
	if full.Result == nil || full.Result.ExitCode != 7 || len(full.Result.Stdout) != n || len(full.Result.Stderr) != n {
		t.Errorf("List: %+v, want exit 7 and the %d bytes of each stream", full.Result, n)
	}
	bare := find(client.ListWithoutOutput())
	switch r := bare.Result; {
	case r == nil:
		t.Errorf("List without output has no result for the exited exec")
	case r.ExitCode != 7 || r.Duration == 0:
		t.Errorf("List without output: exit %d, duration %v; want 7 and the exec's duration", r.ExitCode, r.Duration)
	case len(r.Stdout) != 0 || len(r.Stderr) != 0:
		t.Errorf("List without output carried %d and %d bytes of output", len(r.Stdout), len(r.Stderr))
	}
	if bare.State != runbox.ExecExited || bare.Command != full.Command {
		t.Errorf("List without output: %+v, want the same entry as List's but the output", bare)
	}
}
