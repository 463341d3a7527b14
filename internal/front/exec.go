package front

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/execrules"
	"github.com/runbox/runbox/internal/frontrpc"
)

// Timing as the Go client has it (client/client.go): the exec's deadline
// is the daemon's; past timeout + grace + streamHeadroom without a result,
// the front hands the exec to runbox-full, whose client asks the daemon
// about it; a Cancel is bounded by grace + cancelHeadroom, and the result
// is waited for as long again.
const (
	streamHeadroom = 5 * time.Second
	cancelHeadroom = 5 * time.Second
	// daemonSilence and daemonProbeBound: after daemonSilence without an
	// event, runboxd must answer a handshake within daemonProbeBound
	// (runbox-full's client pings its connection on the same terms).
	daemonSilence    = 5 * time.Second
	daemonProbeBound = 5 * time.Second
)

// run runs the exec, or hands it to runbox-full (args is the whole
// invocation).
func (x *execArgs) run(args []string) int {
	if x.flags.Check() != nil {
		return handOver(args, nil) // runbox-full says what is wrong
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
		return handOver(args, nil) // refused before sending, by runbox-full
	}
	r, ok := resolve(x.key)
	if !ok {
		return handOver(args, nil) // not a sandbox the front reaches
	}
	conn := r.conn
	// From here the Run may reach runboxd: a handover names the exec.
	withID := []string{"--id", spec.ID}
	if x.flags.ID != "" {
		withID = nil // the invocation names it already
	}
	e := &execRun{x: x, spec: spec, dial: r.dial}
	res, started, err := e.follow(conn)
	conn.Close()
	switch {
	case err != nil && !started:
		return handOver(args, withID)
	case err != nil:
		from := []string{"--from", strconv.FormatUint(e.lastSeq+1, 10)}
		if e.gaps > 0 {
			from = append(from, "--from-gaps", strconv.Itoa(e.gaps), "--from-lost", strconv.FormatInt(e.lost, 10))
		}
		return handOver(args, append(withID, from...))
	case e.interrupted.Load() && !res.Cancelled:
		// The command ended before the cancel took: the call failed as
		// the Go client reports a cancelled context.
		return execrules.ReportFailure(os.Stderr, &runbox.Error{Op: "exec", Sandbox: x.key, Exec: spec.ID, Err: context.Canceled})
	}
	res.StreamGaps, res.StreamLost = e.gaps, e.lost
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
	x    *execArgs
	spec runbox.ExecSpec
	dial runbox.Dialer

	lastSeq     uint64 // of the last chunk shown, or the end of the last gap
	gaps        int    // gaps reported, and the bytes they left out
	lost        int64
	interrupted atomic.Bool
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

// follow sends the Run call on conn and shows the exec's events to its
// result. started says the started event came (the exec exists); err is
// any failure, after which runbox-full takes over.
func (e *execRun) follow(conn net.Conn) (res runbox.Result, started bool, err error) {
	// Ctrl-C or SIGTERM cancel the exec on runboxd; the stream then
	// brings its result.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go e.cancelOnSignal(sigs, done, conn)
	var lastEvent atomic.Int64 // when the stream last brought an event, unix ns
	lastEvent.Store(time.Now().UnixNano())
	go e.watchDaemon(done, conn, &lastEvent)

	if e.spec.Timeout > 0 {
		conn.SetReadDeadline(time.Now().Add(e.spec.Timeout + e.grace() + streamHeadroom))
	}
	s, err := frontrpc.Run(conn, e.spec, !e.x.flags.JSON)
	if err != nil {
		return res, false, err
	}
	for {
		ev, err := s.Next()
		lastEvent.Store(time.Now().UnixNano())
		if err != nil {
			var ce *frontrpc.CallError
			if !started && e.interrupted.Load() && errors.As(err, &ce) && ce.Tag == "cancelled" {
				// The cancel's tombstone came before the Run: the command
				// never ran (as the Go client reports it).
				return runbox.Result{ID: e.spec.ID, Cancelled: true}, true, nil
			}
			if err == io.EOF {
				err = frontrpc.ErrStreamBroken // ended without the result
			}
			return res, started, err
		}
		switch ev.Kind {
		case frontrpc.EventStarted:
			started = true
		case frontrpc.EventOutput:
			if ev.Seq <= e.lastSeq {
				continue
			}
			e.lastSeq = ev.Seq
			if ev.Stream == runbox.Stderr {
				_, _ = os.Stderr.Write(ev.Data)
			} else {
				_, _ = os.Stdout.Write(ev.Data)
			}
		case frontrpc.EventGap:
			e.gaps++
			e.lost += ev.Gap.Bytes
			if to := ev.Gap.ToSeq; to > 0 && to-1 > e.lastSeq {
				e.lastSeq = to - 1
			}
			execrules.ReportGap(os.Stderr, ev.Gap)
		case frontrpc.EventExited:
			return ev.Result, true, nil
		}
	}
}

// watchDaemon keeps a silent stream from waiting forever on a runboxd
// that stopped answering without closing its socket (frozen, or SIGSTOPped):
// after daemonSilence without an event it proves runboxd alive with a
// handshake on a connection of its own, as runbox-full's client pings its
// connection; when that fails within daemonProbeBound it ends the
// stream's read, and runbox-full takes over to say what became of the
// sandbox.
func (e *execRun) watchDaemon(done <-chan struct{}, conn net.Conn, lastEvent *atomic.Int64) {
	tick := time.NewTicker(daemonSilence / 2)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if time.Since(time.Unix(0, lastEvent.Load())) < daemonSilence {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), daemonProbeBound)
		c, err := e.dial(ctx)
		cancel()
		if err == nil {
			c.Close()
			lastEvent.Store(time.Now().UnixNano())
			continue
		}
		select {
		case <-done:
		default:
			conn.SetReadDeadline(time.Now())
		}
		return
	}
}

// cancelOnSignal waits for the first signal and cancels the exec on a
// connection of its own, bounded by its grace, then gives the stream on
// conn as long again to bring the result. Later signals are ignored, as
// by runbox-full.
func (e *execRun) cancelOnSignal(sigs <-chan os.Signal, done <-chan struct{}, conn net.Conn) {
	select {
	case <-sigs:
	case <-done:
		return
	}
	e.interrupted.Store(true)
	bound := e.grace() + cancelHeadroom
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if c, err := e.dial(ctx); err == nil {
		c.SetDeadline(time.Now().Add(bound))
		_ = frontrpc.Cancel(c, e.spec.ID)
		c.Close()
	}
	conn.SetReadDeadline(time.Now().Add(bound))
}
