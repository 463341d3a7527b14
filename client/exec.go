package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// ExecOption adjusts one exec (or attach) call.
type ExecOption func(*execOptions)

type execOptions struct {
	spec           runbox.ExecSpec
	stdout, stderr io.Writer
	onChunk        func(runbox.Chunk)
	onGap          func(runbox.OutputGap)
	fromSeq        uint64

	// What the stream missed, reported in Result.StreamGaps/StreamLost.
	gaps int
	lost int64
}

// WithID sets the exec's id; without it the client generates one.
func WithID(id string) ExecOption { return func(o *execOptions) { o.spec.ID = id } }

// WithTimeout bounds the exec's run time; the daemon enforces it and the
// Result says TimedOut.
func WithTimeout(d time.Duration) ExecOption { return func(o *execOptions) { o.spec.Timeout = d } }

// WithGrace sets the time between SIGTERM and SIGKILL when the exec is
// stopped (default runbox.DefaultGrace; runbox.NoGrace: SIGKILL at once).
func WithGrace(d time.Duration) ExecOption { return func(o *execOptions) { o.spec.Grace = d } }

// WithCancelOnDisconnect asks the daemon to stop the exec (stop protocol)
// when every stream following it closes before its Result arrived: the
// caller's process died, or it closed the client without waiting. A
// reconnect after a broken connection keeps the exec.
func WithCancelOnDisconnect() ExecOption {
	return func(o *execOptions) { o.spec.CancelOnDisconnect = true }
}

// WithKillLeftovers asks the daemon to stop what the command leaves
// running in the background as soon as it exits, before the Result.
func WithKillLeftovers() ExecOption { return func(o *execOptions) { o.spec.KillLeftovers = true } }

// WithIdleTimeout stops the exec after d without output.
func WithIdleTimeout(d time.Duration) ExecOption {
	return func(o *execOptions) { o.spec.IdleTimeout = d }
}

// WithEnv sets an environment variable for the exec.
func WithEnv(key, value string) ExecOption {
	return func(o *execOptions) {
		if o.spec.Env == nil {
			o.spec.Env = make(map[string]string)
		}
		o.spec.Env[key] = value
	}
}

// WithCwd sets the exec's working directory.
func WithCwd(dir string) ExecOption { return func(o *execOptions) { o.spec.Cwd = dir } }

// WithStdin gives the exec p as its stdin, which is then closed.
func WithStdin(p []byte) ExecOption { return func(o *execOptions) { o.spec.Stdin = p } }

// WithStdinStream keeps the exec's stdin open for WriteStdin until
// CloseStdin.
func WithStdinStream() ExecOption { return func(o *execOptions) { o.spec.StdinStream = true } }

// WithSession runs the exec in the named shell session: it starts in the
// session's directory and environment, and a normal exit saves them back.
func WithSession(name string) ExecOption { return func(o *execOptions) { o.spec.Session = name } }

// WithSpill says when the full output is also written to a file in the
// sandbox (Result.StdoutSpill, StderrSpill).
func WithSpill(m runbox.SpillMode) ExecOption { return func(o *execOptions) { o.spec.Spill = m } }

// WithPTY runs the command on a pseudo-terminal of rows × cols: it sees a
// terminal on stdin, stdout and stderr, all its output arrives as stdout, and
// WriteStdin types into the terminal (CloseStdin types ^D). Resize changes
// the size later.
func WithPTY(rows, cols uint16) ExecOption {
	return func(o *execOptions) { o.spec.PTY = &runbox.PTYSize{Rows: rows, Cols: cols} }
}

// WithLogin runs the command in a login shell.
func WithLogin() ExecOption { return func(o *execOptions) { o.spec.Login = true } }

// WithOutputLimits sets how many bytes of the start (head) and end (tail) of
// each stream the Result keeps.
func WithOutputLimits(head, tail int) ExecOption {
	return func(o *execOptions) { o.spec.HeadBytes, o.spec.TailBytes = head, tail }
}

// WithStdout writes the exec's stdout to w as it arrives (write errors are
// ignored). The Result still carries its head and tail.
func WithStdout(w io.Writer) ExecOption { return func(o *execOptions) { o.stdout = w } }

// WithStderr writes the exec's stderr to w as it arrives.
func WithStderr(w io.Writer) ExecOption { return func(o *execOptions) { o.stderr = w } }

// WithOnChunk calls fn with every output chunk as it arrives, in sequence
// order, from the goroutine running the call.
func WithOnChunk(fn func(runbox.Chunk)) ExecOption { return func(o *execOptions) { o.onChunk = fn } }

// WithOnGap calls fn for every gap in the streamed output (see
// runbox.OutputGap), from the goroutine running the call. The Result counts
// gaps either way.
func WithOnGap(fn func(runbox.OutputGap)) ExecOption {
	return func(o *execOptions) { o.onGap = fn }
}

// WithFromSeq makes Attach replay output from sequence number seq (default:
// from the start, as far as the daemon's ring reaches). Exec, ExecSpec,
// Start and StartSpec ignore it: they follow their exec from its start.
func WithFromSeq(seq uint64) ExecOption { return func(o *execOptions) { o.fromSeq = seq } }

func newExecOptions(spec runbox.ExecSpec, opts []ExecOption) execOptions {
	spec.Env = maps.Clone(spec.Env) // WithEnv must not write to the caller's map
	o := execOptions{spec: spec}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// streaming reports whether the call wants output as it arrives.
func (o *execOptions) streaming() bool {
	return o.stdout != nil || o.stderr != nil || o.onChunk != nil
}

// deliver hands a chunk to the caller's callback and writers. Without a
// callback nothing may keep the chunk's bytes after (an io.Writer does not
// retain them), so they go back for the next chunk (see releaseOutputData).
func (o *execOptions) deliver(c runbox.Chunk) {
	if o.onChunk != nil {
		o.onChunk(c)
	}
	switch {
	case c.Stream == runbox.Stdout && o.stdout != nil:
		_, _ = o.stdout.Write(c.Data)
	case c.Stream == runbox.Stderr && o.stderr != nil:
		_, _ = o.stderr.Write(c.Data)
	}
	if o.onChunk == nil {
		releaseOutputData(c.Data)
	}
}

// noteGap records a gap in the streamed output.
func (o *execOptions) noteGap(g runbox.OutputGap) {
	o.gaps++
	o.lost += g.Bytes
	if o.onGap != nil {
		o.onGap(g)
	}
}

// result completes a daemon's result with what only the client knows.
func (o *execOptions) result(p *runboxv1.Result) runbox.Result {
	r := wire.ResultFromProto(p)
	r.StreamGaps, r.StreamLost = o.gaps, o.lost
	return r
}

// newExecID returns a fresh exec id. The client always chooses the id, so a
// Run it must re-issue after a broken connection names the same exec.
func newExecID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Exec runs a shell command (bash -c, or sh -c where bash is absent) and
// returns its Result once it has ended. A non-zero exit status, a timeout
// or a cancel is reported in the Result, not as an error.
//
// If ctx ends first, the exec is cancelled on the daemon, and Exec returns
// its Result (Cancelled set) together with an error wrapping ctx.Err().
func (c *Client) Exec(ctx context.Context, command string, opts ...ExecOption) (runbox.Result, error) {
	return c.ExecSpec(ctx, runbox.ExecSpec{Command: command}, opts...)
}

// ExecArgv runs argv directly, without a shell, like Exec.
func (c *Client) ExecArgv(ctx context.Context, argv []string, opts ...ExecOption) (runbox.Result, error) {
	return c.ExecSpec(ctx, runbox.ExecSpec{Argv: argv}, opts...)
}

// ExecSpec runs spec, with opts applied over it, like Exec.
func (c *Client) ExecSpec(ctx context.Context, spec runbox.ExecSpec, opts ...ExecOption) (runbox.Result, error) {
	o := newExecOptions(spec, opts)
	if err := checkSpec(o.spec); err != nil {
		return runbox.Result{}, c.opError("exec", o.spec.ID, nil, err)
	}
	return c.newProcess(o).Wait(ctx)
}

// checkSpec refuses, before anything is sent, a spec the daemon would
// refuse for its size or its NUL bytes (runbox.ExecSpec.CheckInput), or
// whose id or session name cannot be sent (they must be UTF-8; the daemon
// then checks their characters).
func checkSpec(spec runbox.ExecSpec) error {
	switch {
	case !utf8.ValidString(spec.ID):
		return fmt.Errorf("%w: exec id %q is not valid UTF-8", runbox.ErrInvalidSpec, spec.ID)
	case !utf8.ValidString(spec.Session):
		return fmt.Errorf("%w: session name %q is not valid UTF-8", runbox.ErrInvalidSpec, spec.Session)
	}
	return spec.CheckInput()
}

// Start runs a shell command and returns once it has started. Call Wait for
// its Result: output for WithStdout, WithStderr and WithOnChunk is delivered
// during Wait, and the stream Start opened is released by Wait (or Close).
// If ctx ends before the exec has started, the exec is cancelled and Start
// returns an error.
func (c *Client) Start(ctx context.Context, command string, opts ...ExecOption) (*Process, error) {
	return c.StartSpec(ctx, runbox.ExecSpec{Command: command}, opts...)
}

// StartSpec runs spec, with opts applied over it, like Start.
func (c *Client) StartSpec(ctx context.Context, spec runbox.ExecSpec, opts ...ExecOption) (*Process, error) {
	o := newExecOptions(spec, opts)
	if err := checkSpec(o.spec); err != nil {
		return nil, c.opError("exec", o.spec.ID, nil, err)
	}
	p := c.newProcess(o)
	p.mu.Lock()
	defer p.mu.Unlock()
	res, started, err := p.drive(ctx, true)
	if err != nil || !started {
		p.finish(res, err)
		return nil, err
	}
	return p, nil
}

// Attach follows the existing exec with id to its end and returns its
// Result, replaying output (to WithStdout, WithStderr, WithOnChunk) from
// WithFromSeq. If ctx ends first, Attach returns ctx's error and the exec
// keeps running.
func (c *Client) Attach(ctx context.Context, id string, opts ...ExecOption) (runbox.Result, error) {
	o := newExecOptions(runbox.ExecSpec{}, opts)
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	f := c.attachFollower(ctx, id, o.streaming(), o.fromSeq, false)
	defer f.close()
	for {
		ev, err := f.next()
		if err != nil {
			return runbox.Result{}, c.opError("attach", id, ctx, err)
		}
		switch e := ev.GetEvent().(type) {
		case *runboxv1.ExecEvent_Output:
			o.deliver(wire.ChunkFromProto(e.Output))
		case *runboxv1.ExecEvent_Gap:
			o.noteGap(wire.GapFromProto(e.Gap))
		case *runboxv1.ExecEvent_Exited:
			return o.result(e.Exited.GetResult()), nil
		}
	}
}

func (c *Client) attachFollower(ctx context.Context, id string, streamOutput bool, fromSeq uint64, seen bool) *follower {
	f := &follower{c: c, id: id, ctx: ctx, streamOutput: streamOutput, seen: seen}
	if fromSeq > 0 {
		f.lastSeq = fromSeq - 1
	}
	return f
}

// Process is an exec started with Start. Its methods are safe for
// concurrent use; Wait may be called more than once and returns the same
// outcome.
type Process struct {
	c    *Client
	id   string
	opts execOptions
	pid  atomic.Int64

	// cancelStream ends the Run stream. The stream's context is
	// independent of any caller's: the daemon owns the exec's deadline, and
	// the stream's own deadline only catches a daemon that never answers.
	cancelStream context.CancelCauseFunc
	f            *follower

	mu       sync.Mutex // serialises Start's and Wait's use of the stream
	finished bool
	result   runbox.Result
	err      error

	overdueMu sync.Mutex
	overdue   *time.Timer // when the daemon should have reported the exec's end
	done      bool        // the outcome is in: no more overdue checks
}

// errNoResult is why a stream is abandoned when the daemon has not
// reported an exec's end well after its deadline, and no longer answers, no
// longer knows the exec, or has kept it past maxOverdue.
var errNoResult = fmt.Errorf("%w: no result from the daemon after the exec's deadline", runbox.ErrSandboxLost)

// errNoResultAfterCancel is the same after a cancel.
var errNoResultAfterCancel = fmt.Errorf("%w: no result from the daemon after cancelling the exec", runbox.ErrSandboxLost)

func (c *Client) newProcess(o execOptions) *Process {
	if o.spec.ID == "" {
		o.spec.ID = newExecID()
	}
	ctx, cancel := context.WithCancelCause(c.base)
	p := &Process{c: c, id: o.spec.ID, opts: o, cancelStream: cancel}
	p.f = &follower{
		c: c, id: o.spec.ID, ctx: ctx, streamOutput: o.streaming(),
		run: &runboxv1.RunRequest{Spec: wire.SpecToProto(o.spec), StreamOutput: o.streaming()},
	}
	if o.spec.Timeout > 0 {
		p.watchOverdue(o.spec.Timeout+p.grace()+c.headroom, errNoResult)
	}
	return p
}

func (p *Process) grace() time.Duration {
	switch g := p.opts.spec.Grace; {
	case g > 0:
		return g
	case g < 0: // runbox.NoGrace
		return 0
	}
	return runbox.DefaultGrace
}

// watchOverdue arms the exec's deadline: by then the daemon should have
// reported its end. Past it the client asks the daemon about the exec.
// While the daemon answers and still has it, the daemon is busy, not gone
// (stopping a fork bomb on a loaded machine can take it seconds), and the
// client waits on, up to maxOverdue; a daemon that no longer answers, or no
// longer knows the exec, is lost, and the stream ends with cause.
//
// The question is signal 0 to the exec, which delivers nothing and costs
// the same however many execs, and however much of their output, the
// daemon keeps (a List carries every retained result's output: up to the
// retention budget, tens of MB, too slow to answer in time on a loaded
// machine, where a busy daemon would then be called lost).
func (p *Process) watchOverdue(after time.Duration, cause error) {
	p.overdueMu.Lock()
	defer p.overdueMu.Unlock()
	if p.done {
		return
	}
	if p.overdue != nil {
		p.overdue.Stop()
	}
	var waited time.Duration
	var check func()
	check = func() {
		ctx, cancel := context.WithTimeout(p.c.base, p.c.headroom)
		_, err := p.c.Signal(ctx, p.id, 0)
		answered := err == nil || ctx.Err() == nil && !errors.Is(err, runbox.ErrSandboxLost)
		cancel()
		// The daemon still has the exec (running, or ended and kept:
		// ErrNotRunning), or answered with another error (it is there,
		// though it did not say whether it has the exec).
		busy := answered && !errors.Is(err, runbox.ErrExecNotFound)
		p.overdueMu.Lock()
		defer p.overdueMu.Unlock()
		if p.done {
			return
		}
		if busy && waited < p.c.overdue {
			waited += p.c.headroom
			p.overdue = time.AfterFunc(p.c.headroom, check)
			return
		}
		p.cancelStream(cause)
	}
	p.overdue = time.AfterFunc(after, check)
}

// stopOverdue ends the deadline watch once the outcome is in.
func (p *Process) stopOverdue() {
	p.overdueMu.Lock()
	defer p.overdueMu.Unlock()
	p.done = true
	if p.overdue != nil {
		p.overdue.Stop()
	}
}

// ID returns the exec's id.
func (p *Process) ID() string { return p.id }

// Pid returns the exec's leader pid inside the sandbox (for information).
func (p *Process) Pid() int { return int(p.pid.Load()) }

// Wait waits for the exec to end and returns its Result, delivering output
// to the writers given at Start as it arrives. If ctx ends first, the exec
// is cancelled on the daemon and Wait returns its Result (Cancelled set)
// with an error wrapping ctx.Err().
func (p *Process) Wait(ctx context.Context) (runbox.Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return p.result, p.err
	}
	res, _, err := p.drive(ctx, false)
	p.finish(res, err)
	return res, err
}

// finish records the outcome and releases the stream. Called with p.mu held.
func (p *Process) finish(res runbox.Result, err error) {
	p.finished, p.result, p.err = true, res, err
	p.stopOverdue()
	p.f.close()
	p.cancelStream(context.Canceled)
}

// drive reads the Run stream until the started event (untilStarted) or the
// exited event. If ctx ends meanwhile it cancels the exec on the daemon and
// reads on to the exited event. started reports whether drive stopped at the
// started event. Called with p.mu held.
func (p *Process) drive(ctx context.Context, untilStarted bool) (res runbox.Result, started bool, err error) {
	if ctx.Err() != nil && !p.f.opened {
		// The caller gave up before the Run was sent: never send it (a
		// Cancel racing it could arrive after a quick command had run),
		// and leave a tombstone so that the id never runs.
		p.cancelWithinGrace()
		return runbox.Result{ID: p.id, Cancelled: true}, false, p.c.opError("exec", p.id, context.Background(), ctx.Err())
	}
	cancelled := make(chan struct{})
	watch := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		p.cancelOnDaemon()
	})
	// unwatch stops watching ctx and reports whether the exec was
	// cancelled because of it, after waiting for that cancel to be answered.
	var unwatched, fired bool
	unwatch := func() bool {
		if !unwatched {
			unwatched = true
			if !watch() {
				<-cancelled
				fired = true
			}
		}
		return fired
	}
	defer unwatch()

	for {
		ev, err := p.f.next()
		if err != nil {
			err = p.c.opError("exec", p.id, context.Background(), err)
			if unwatch() && errors.Is(err, runbox.ErrCancelled) {
				// The cancel left a tombstone before the Run reached the
				// daemon, so the command never ran.
				return runbox.Result{ID: p.id, Cancelled: true}, false, p.c.opError("exec", p.id, context.Background(), ctx.Err())
			}
			return runbox.Result{}, false, err
		}
		switch e := ev.GetEvent().(type) {
		case *runboxv1.ExecEvent_Started:
			p.pid.Store(e.Started.GetPid())
			if untilStarted && !unwatch() {
				return runbox.Result{}, true, nil
			}
		case *runboxv1.ExecEvent_Output:
			p.opts.deliver(wire.ChunkFromProto(e.Output))
		case *runboxv1.ExecEvent_Gap:
			p.opts.noteGap(wire.GapFromProto(e.Gap))
		case *runboxv1.ExecEvent_Exited:
			res := p.opts.result(e.Exited.GetResult())
			if unwatch() {
				return res, false, p.c.opError("exec", p.id, context.Background(), ctx.Err())
			}
			return res, false, nil
		}
	}
}

// cancelOnDaemon cancels the exec because the caller's context ended, on a
// fresh context bounded by the exec's grace, then gives the stream as long
// again to deliver the exit event.
func (p *Process) cancelOnDaemon() {
	p.cancelWithinGrace() // the stream reports the outcome
	p.watchOverdue(p.grace()+cancelHeadroom, errNoResultAfterCancel)
}

// cancelWithinGrace asks the daemon to cancel the exec (or to leave a
// tombstone for its id), on a context independent of the caller's and
// bounded by the exec's grace.
func (p *Process) cancelWithinGrace() {
	ctx, cancel := context.WithTimeout(p.c.base, p.grace()+cancelHeadroom)
	defer cancel()
	_ = p.c.Cancel(ctx, p.id, 0)
}

// Cancel stops the exec through the stop protocol and returns once it has
// stopped. A Wait in progress then returns the Result with Cancelled set.
func (p *Process) Cancel(ctx context.Context) error { return p.c.Cancel(ctx, p.id, 0) }

// Signal sends sig to every live process of the exec.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	_, err := p.c.Signal(ctx, p.id, sig)
	return err
}

// WriteStdin writes to the exec's stdin (started WithStdinStream or WithPTY).
func (p *Process) WriteStdin(ctx context.Context, b []byte) error {
	return p.c.WriteStdin(ctx, p.id, b)
}

// CloseStdin closes the exec's stdin.
func (p *Process) CloseStdin(ctx context.Context) error { return p.c.CloseStdin(ctx, p.id) }

// Resize changes the terminal size of an exec started WithPTY.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.c.Resize(ctx, p.id, rows, cols)
}

// Output follows the exec's output from sequence number fromSeq (0 or 1:
// from the start, as far as the daemon's ring reaches) on a stream of its
// own, until the exec has ended. A gap in the output (see runbox.OutputGap)
// is yielded as a *runbox.OutputGap error with a zero Chunk, and the
// sequence goes on. Any other failure is yielded once, as the error of a
// zero Chunk, and ends the sequence. Ending ctx ends the sequence with
// ctx's error; the exec keeps running.
func (p *Process) Output(ctx context.Context, fromSeq uint64) iter.Seq2[runbox.Chunk, error] {
	return func(yield func(runbox.Chunk, error) bool) {
		ctx, cancel := p.c.callContext(ctx)
		defer cancel()
		f := p.c.attachFollower(ctx, p.id, true, fromSeq, true)
		defer f.close()
		for {
			ev, err := f.next()
			if err != nil {
				yield(runbox.Chunk{}, p.c.opError("output", p.id, ctx, err))
				return
			}
			switch e := ev.GetEvent().(type) {
			case *runboxv1.ExecEvent_Output:
				if !yield(wire.ChunkFromProto(e.Output), nil) {
					return
				}
			case *runboxv1.ExecEvent_Gap:
				g := wire.GapFromProto(e.Gap)
				if !yield(runbox.Chunk{}, &g) {
					return
				}
			case *runboxv1.ExecEvent_Exited:
				return
			}
		}
	}
}
