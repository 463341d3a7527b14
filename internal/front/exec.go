package front

import (
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/execrules"
)

// Timing as the Go client has it (client/client.go): the exec's deadline
// is the daemon's; past timeout + grace + streamHeadroom without a result,
// the front re-attaches, which proves the daemon still has the exec, and
// gives it up to maxOverdue more; a Cancel is bounded by grace +
// cancelHeadroom, and the result is waited for as long again.
const (
	streamHeadroom = 5 * time.Second
	cancelHeadroom = 5 * time.Second
	maxOverdue     = time.Minute
	// daemonSilence and daemonProbeBound: after daemonSilence without an
	// event, runboxd must answer a handshake within daemonProbeBound
	// (runbox-full's client pings its connection on the same terms).
	daemonSilence    = 5 * time.Second
	daemonProbeBound = 5 * time.Second
	// reconnectWindow is how long a broken stream is retried, from its
	// first failure, before the sandbox is reported lost
	// (client.DefaultReconnectWindow); minBackoff and maxBackoff space the
	// attempts (the client's).
	reconnectWindow = 1500 * time.Millisecond
	minBackoff      = 50 * time.Millisecond
	maxBackoff      = 400 * time.Millisecond
	// forgottenInfoTimeout bounds the Info call that tells a restarted
	// daemon from one that let an exec go (the client's).
	forgottenInfoTimeout = 10 * time.Second
)

// run runs the exec, or hands it to runbox-full (args is the whole
// invocation) when the front cannot: only before the Run is sent.
func (x *execArgs) run(args []string) int {
	if x.flags.Check() != nil {
		return handOver(args) // runbox-full says what is wrong
	}
	spec := x.flags.Spec(x.command)
	spec.CancelOnDisconnect = true // --cancel-on-exit, the only value the front takes
	if !x.flags.JSON {
		// Streamed, as runbox-full asks: runboxd spills only from the
		// first byte the stream misses, if any.
		spec.Spill = runbox.SpillUnsent
	}
	if spec.ID == "" {
		spec.ID = execrules.NewExecID()
	}
	if !utf8.ValidString(spec.ID) || !utf8.ValidString(spec.Session) || spec.CheckInput() != nil {
		return handOver(args) // refused before sending, by runbox-full
	}
	r, ok := resolve(x.key)
	if !ok {
		return handOver(args) // not a sandbox the front reaches
	}
	// From here on the exec is the front's: whatever happens to its
	// stream, it follows the exec itself (follow) and reports its end.
	e := &execRun{x: x, spec: spec, r: r, first: r.conn}
	res, err := e.follow()
	switch {
	case err != nil:
		return execrules.ReportFailure(os.Stderr, &runbox.Error{Op: "exec", Sandbox: x.key, Exec: spec.ID, Err: err})
	case e.interrupted.Load() && !res.Cancelled:
		// The command ended before the cancel took: the call failed as
		// the Go client reports a cancelled context.
		return execrules.ReportFailure(os.Stderr, &runbox.Error{Op: "exec", Sandbox: x.key, Exec: spec.ID, Err: context.Canceled})
	}
	res.StreamGaps, res.StreamLost = e.gaps, e.lost
	if e.gaps > 0 {
		// A gap met on an Attach from a sequence number does not know its
		// bytes (runboxd knows the reader's sequence number, not its byte
		// offset): what the command wrote less what was shown is exact.
		res.StreamLost = max(res.StreamLost, res.StdoutBytes-e.shown[0]+res.StderrBytes-e.shown[1])
	}
	if x.flags.JSON {
		if err := execrules.WriteJSON(os.Stdout, execrules.ResultJSON(res)); err != nil {
			return execrules.ReportFailure(os.Stderr, &runbox.Error{Op: "exec", Sandbox: x.key, Exec: spec.ID, Err: err})
		}
	} else {
		execrules.ReportStop(os.Stderr, res, x.flags.Timeout, x.flags.Idle)
		execrules.ReportLeftovers(os.Stderr, res, r.id)
	}
	return execrules.ExitStatus(res)
}

// execRun is one exec the front follows.
type execRun struct {
	x     *execArgs
	spec  runbox.ExecSpec
	r     reach
	first net.Conn // resolve's connection, for the first stream

	// What the streams delivered, read and written by follow's goroutine
	// only.
	seen    bool      // a started event came: the exec exists
	seenAt  time.Time // when
	lastSeq uint64    // of the last chunk shown, or the end of the last gap
	gaps    int       // gaps reported, and the bytes they left out
	lost    int64
	shown   [2]int64 // bytes of stdout and stderr shown
	events  int      // events received, over every stream

	interrupted atomic.Bool
	lastEvent   atomic.Int64 // when a stream last brought an event, unix ns

	mu      sync.Mutex
	conn    net.Conn  // the current stream's, nil between streams
	overdue time.Time // timeout + grace + streamHeadroom after the start; zero without a timeout
	// overdueOnce: overdue passed once and was moved maxOverdue later.
	overdueOnce bool
	cancelBy    time.Time // after a cancel: when its result is given up
	silent      error     // runboxd did not answer watchDaemon's handshake
}

// grace is the exec's grace period as the daemon applies it.
func (e *execRun) grace() time.Duration {
	switch g := e.spec.Grace; {
	case g > 0:
		return g
	case g < 0:
		return 0
	}
	return runbox.DefaultGrace
}
