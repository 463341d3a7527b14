package front

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/execrules"
	"github.com/runbox/runbox/internal/frontrpc"
)

// errStreamEnded is why a stream that ended cleanly before the exec's
// exit event is opened again: runboxd never ends one early on purpose.
var errStreamEnded = fmt.Errorf("%w: it ended before the exec's exit event", frontrpc.ErrStreamBroken)

// follow runs the exec and shows its events to its result, as the Go
// client's follower does (client/follow.go): the first stream, on
// resolve's connection, is the Run call; when a stream breaks, the front
// dials runboxd again and sends the Run again until the started event came
// (the id is fixed, so runboxd attaches instead of running the command
// twice), and an Attach from the sequence number after the last one shown
// after it. So every byte is shown exactly once, in order, and gaps are
// counted once. A broken stream is retried for reconnectWindow from its
// first failure; then, or at once when the sandbox's record says its
// runboxd is gone, the sandbox is lost. An answer from runboxd (an error
// it sent) is never retried.
func (e *execRun) follow() (runbox.Result, error) {
	// Ctrl-C or SIGTERM cancel the exec on runboxd; the stream then
	// brings its result.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	e.lastEvent.Store(time.Now().UnixNano())
	if e.spec.Timeout > 0 {
		e.overdue = time.Now().Add(e.spec.Timeout + e.grace() + streamHeadroom)
	}
	go e.cancelOnSignal(sigs, done)
	go e.watchDaemon(done)

	var brokeAt time.Time // when the current run of failures began
	backoff := minBackoff
	for {
		events := e.events
		res, err := e.stream()
		var ce *frontrpc.CallError
		switch {
		case err == nil:
			return res, nil
		case !e.seen && e.interrupted.Load() && errors.As(err, &ce) && ce.Tag == "cancelled":
			// The cancel's tombstone came before the Run: the command
			// never ran (as the Go client reports it).
			return runbox.Result{ID: e.spec.ID, Cancelled: true}, nil
		}
		if e.events > events {
			brokeAt, backoff = time.Time{}, minBackoff // the stream worked for a while
		}
		if err := e.retry(err, &brokeAt, &backoff); err != nil {
			return runbox.Result{}, err
		}
	}
}

// stream opens one stream (resolve's connection first, then a new one):
// Run until the exec is seen, Attach after; and shows its events until the
// exit event, whose result it returns, or an error.
func (e *execRun) stream() (runbox.Result, error) {
	conn := e.first
	e.first = nil
	if conn == nil {
		ctx, cancel := context.WithTimeout(context.Background(), e.r.dialBound)
		c, err := e.r.dial(ctx)
		cancel()
		if err != nil {
			return runbox.Result{}, err
		}
		conn = c
	}
	e.setConn(conn)
	defer func() {
		e.setConn(nil)
		conn.Close()
	}()
	streamOutput := !e.x.flags.JSON
	var s *frontrpc.Stream
	var err error
	if !e.seen {
		s, err = frontrpc.Run(conn, e.spec, streamOutput)
	} else {
		s, err = frontrpc.Attach(conn, e.spec.ID, streamOutput, e.lastSeq+1)
	}
	if err != nil {
		return runbox.Result{}, err
	}
	// Output that arrived in one read is shown with one write; what was
	// gathered is shown before Next may read (and move its buffer), and
	// before anything else is.
	var out shownOutput
	defer out.flush()
	for {
		if !s.Buffered() {
			out.flush()
		}
		ev, err := s.Next()
		if err != nil {
			if err == io.EOF {
				err = errStreamEnded
			}
			return runbox.Result{}, err
		}
		e.events++
		e.lastEvent.Store(time.Now().UnixNano())
		switch ev.Kind {
		case frontrpc.EventStarted:
			if !e.seen {
				e.seen, e.seenAt = true, time.Now()
			}
		case frontrpc.EventOutput:
			if ev.Seq <= e.lastSeq {
				continue // shown before the stream broke
			}
			e.lastSeq = ev.Seq
			out.add(ev.Stream, ev.Data)
			if ev.Stream == runbox.Stderr {
				e.shown[1] += int64(len(ev.Data))
			} else {
				e.shown[0] += int64(len(ev.Data))
			}
		case frontrpc.EventGap:
			if to := ev.Gap.ToSeq; to > 0 && to-1 <= e.lastSeq {
				continue // reported before the stream broke
			}
			out.flush()
			e.gaps++
			e.lost += ev.Gap.Bytes
			if to := ev.Gap.ToSeq; to > 0 {
				e.lastSeq = to - 1
			}
			execrules.ReportGap(os.Stderr, ev.Gap)
		case frontrpc.EventExited:
			out.flush()
			return ev.Result, nil
		}
	}
}

// Why the front gives up following an exec whose daemon stopped answering
// (the Go client's errors for the same).
var (
	errNoResult            = fmt.Errorf("%w: no result from the daemon after the exec's deadline", runbox.ErrSandboxLost)
	errNoResultAfterCancel = fmt.Errorf("%w: no result from the daemon after cancelling the exec", runbox.ErrSandboxLost)
)

// retry decides what a stream's failure err means: nil, after a backoff,
// when a new stream should be opened, else the error to report.
func (e *execRun) retry(err error, brokeAt *time.Time, backoff *time.Duration) error {
	now := time.Now()
	e.mu.Lock()
	silent, cancelBy, overdue := e.silent, e.cancelBy, false
	if !e.overdue.IsZero() && !now.Before(e.overdue) {
		// Past the exec's deadline: once, a new stream proves the daemon
		// still has the exec, and gets maxOverdue more.
		overdue = e.overdueOnce
		e.overdue, e.overdueOnce = e.overdue.Add(maxOverdue), true
	}
	e.mu.Unlock()
	switch {
	case silent != nil:
		return e.r.lostError(silent)
	case !cancelBy.IsZero() && !now.Before(cancelBy):
		return errNoResultAfterCancel
	case overdue:
		return errNoResult
	case !transient(err):
		if e.seen && errors.Is(err, runbox.ErrExecNotFound) {
			return e.forgotten(err)
		}
		return err
	}
	if e.r.gone != nil {
		if why := e.r.gone(); why != nil {
			return why
		}
	}
	if brokeAt.IsZero() {
		*brokeAt = now
	}
	left := reconnectWindow - now.Sub(*brokeAt)
	if left <= 0 {
		return e.r.lostError(err)
	}
	time.Sleep(min(*backoff, left))
	*backoff = min(*backoff*2, maxBackoff)
	return nil
}

// transient reports whether err is a failure of the connection rather
// than an answer from runboxd (client.transient): an error runboxd sent
// is an answer, but for an untagged "unavailable" (a stopping daemon); a
// refused secret, a frozen sandbox and a request over the size limit will
// not change on a new connection.
func transient(err error) bool {
	var ce *frontrpc.CallError
	if errors.As(err, &ce) {
		return ce.Tag == "" && ce.Code == "unavailable"
	}
	return !errors.Is(err, runbox.ErrUnauthenticated) && !errors.Is(err, runbox.ErrSandboxPaused) &&
		!errors.Is(err, runbox.ErrTooLarge)
}

// forgotten is the error for an exec runboxd no longer knows although the
// front saw it start (notFound, runboxd's answer), as the Go client tells
// them apart: a daemon that started after that moment restarted, and the
// exec died with the one before (runbox.ErrSandboxLost); a daemon up since
// before it let the exited exec go (runbox.ErrExecNotFound).
func (e *execRun) forgotten(notFound error) error {
	ctx, cancel := context.WithTimeout(context.Background(), forgottenInfoTimeout)
	defer cancel()
	up, err := func() (time.Time, error) {
		c, err := e.r.dial(ctx)
		if err != nil {
			return time.Time{}, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(forgottenInfoTimeout))
		return frontrpc.Info(c)
	}()
	if err != nil {
		return fmt.Errorf("%w: exec %s is gone from the daemon, which does not answer Info either (%v): %v",
			runbox.ErrSandboxLost, e.spec.ID, err, notFound)
	}
	if up.After(e.seenAt) {
		return fmt.Errorf("%w: exec %s is gone: the daemon restarted at %s, after the exec started: %v",
			runbox.ErrSandboxLost, e.spec.ID, up.UTC().Format(time.RFC3339), notFound)
	}
	return fmt.Errorf("%w: the daemon (up since %s) no longer keeps exec %s: it ended and its result passed the retention or the budget of retained results before it was read: %v",
		runbox.ErrExecNotFound, up.UTC().Format(time.RFC3339), e.spec.ID, notFound)
}

// setConn makes conn the current stream's connection (nil: none), with
// the read deadline the exec's state gives.
func (e *execRun) setConn(conn net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.conn = conn
	e.pokeLocked()
}

// pokeLocked sets the current connection's read deadline: the earliest of
// the exec's overdue time, a cancel's bound, and now once runboxd did not
// answer a handshake. e.mu is held.
func (e *execRun) pokeLocked() {
	if e.conn == nil {
		return
	}
	var d time.Time
	for _, t := range []time.Time{e.overdue, e.cancelBy} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	if e.silent != nil {
		d = time.Now()
	}
	e.conn.SetReadDeadline(d)
}

// watchDaemon keeps a silent stream from waiting forever on a runboxd
// that stopped answering without closing its socket (frozen, or
// SIGSTOPped): after daemonSilence without an event it proves runboxd
// alive with a handshake on a connection of its own, as runbox-full's
// client pings its connection; when that fails within daemonProbeBound
// the sandbox is lost, and the stream's read ends.
func (e *execRun) watchDaemon(done <-chan struct{}) {
	tick := time.NewTicker(daemonSilence / 2)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if time.Since(time.Unix(0, e.lastEvent.Load())) < daemonSilence {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), daemonProbeBound)
		c, err := e.r.dial(ctx)
		cancel()
		if err == nil {
			c.Close()
			e.lastEvent.Store(time.Now().UnixNano())
			continue
		}
		e.mu.Lock()
		e.silent = fmt.Errorf("%w: runboxd did not answer within %v after %v without an event: %v",
			runbox.ErrSandboxLost, daemonProbeBound, daemonSilence, err)
		e.pokeLocked()
		e.mu.Unlock()
		return
	}
}

// cancelOnSignal waits for the first signal and cancels the exec on a
// connection of its own, bounded by its grace, then gives the streams as
// long again to bring the result. Later signals are ignored, as by
// runbox-full.
func (e *execRun) cancelOnSignal(sigs <-chan os.Signal, done <-chan struct{}) {
	select {
	case <-sigs:
	case <-done:
		return
	}
	e.interrupted.Store(true)
	bound := e.grace() + cancelHeadroom
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if c, err := e.r.dial(ctx); err == nil {
		c.SetDeadline(time.Now().Add(bound))
		_ = frontrpc.Cancel(c, e.spec.ID)
		c.Close()
	}
	e.mu.Lock()
	e.cancelBy = time.Now().Add(bound)
	e.pokeLocked()
	e.mu.Unlock()
}
