package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// follower reads one exec's event stream and survives the stream breaking.
// Before the started event it re-issues Run with the same spec (the id is
// fixed, so the daemon attaches instead of running the command again); after
// it, it attaches from the sequence number after the last one delivered.
// Output is therefore delivered exactly once, in order.
type follower struct {
	c  *Client
	id string
	// ctx bounds every stream; its cause is the error when it ends.
	ctx context.Context
	// run is the request to re-issue until the started event; nil to attach.
	run          *runboxv1.RunRequest
	streamOutput bool

	// seen is set once a started event arrived, at seenAt: from then on
	// the exec is known to exist, so the daemon forgetting it means it
	// restarted, or it let the exited exec go (retention, the budget of
	// retained results) before its end was read; forgotten tells which.
	seen   bool
	seenAt time.Time
	// opened is set once a stream was first asked for: the Run may have
	// reached the daemon.
	opened bool
	// lastSeq is the sequence number of the last chunk delivered (or the
	// end of the last gap).
	lastSeq uint64
	stream  *connect.ServerStreamForClient[runboxv1.ExecEvent]
}

// open starts a stream: Run until the exec is seen, Attach after.
func (f *follower) open() (*connect.ServerStreamForClient[runboxv1.ExecEvent], error) {
	f.opened = true
	if f.run != nil && !f.seen {
		return f.c.rpc.Run(f.ctx, connect.NewRequest(f.run))
	}
	return f.c.rpc.Attach(f.ctx, connect.NewRequest(&runboxv1.AttachRequest{
		Id: f.id, StreamOutput: f.streamOutput, FromSeq: f.lastSeq + 1,
	}))
}

// next returns the exec's next event, reconnecting as needed. Its errors are
// the daemon's own (tagged), runbox.ErrSandboxLost once the reconnect window
// has passed, or the cause of f.ctx ending.
func (f *follower) next() (*runboxv1.ExecEvent, error) {
	var brokeAt time.Time // when the current run of failures began
	backoff := minBackoff
	for {
		if f.stream == nil {
			s, err := f.open()
			if err != nil {
				if err := f.retry(err, &brokeAt, &backoff); err != nil {
					return nil, err
				}
				continue
			}
			f.stream = s
		}
		if f.stream.Receive() {
			ev := f.stream.Msg()
			switch e := ev.GetEvent().(type) {
			case *runboxv1.ExecEvent_Started:
				if !f.seen {
					f.seen, f.seenAt = true, time.Now()
				}
			case *runboxv1.ExecEvent_Output:
				if e.Output.GetSeq() <= f.lastSeq {
					continue // already delivered before a reconnect
				}
				f.lastSeq = e.Output.GetSeq()
			case *runboxv1.ExecEvent_Gap:
				if to := e.Gap.GetToSeq(); to > 0 && to-1 > f.lastSeq {
					f.lastSeq = to - 1
				}
			}
			return ev, nil
		}
		err := f.stream.Err()
		f.stream.Close()
		f.stream = nil
		if err == nil {
			err = errStreamEnded
		}
		if err := f.retry(err, &brokeAt, &backoff); err != nil {
			return nil, err
		}
	}
}

// retry decides what a stream failure means. It returns nil after a backoff
// when the stream should be opened again, or the error to give up with.
func (f *follower) retry(err error, brokeAt *time.Time, backoff *time.Duration) error {
	if f.ctx.Err() != nil {
		return context.Cause(f.ctx)
	}
	if refusal := f.c.refused.get(); refusal != nil {
		return refusal // the daemon wants a secret: no retry will be let in
	}
	if !transient(err) {
		if sentinel, _, _ := wire.FromConnectError(err); f.seen && sentinel == runbox.ErrExecNotFound {
			return f.forgotten(err)
		}
		return err
	}
	now := time.Now()
	if brokeAt.IsZero() {
		*brokeAt = now
	}
	left := f.c.window - now.Sub(*brokeAt)
	if left <= 0 {
		return fmt.Errorf("%w: %v", runbox.ErrSandboxLost, err)
	}
	t := time.NewTimer(min(*backoff, left))
	defer t.Stop()
	select {
	case <-t.C:
	case <-f.ctx.Done():
		return context.Cause(f.ctx)
	}
	*backoff = min(*backoff*2, maxBackoff)
	return nil
}

// forgotten is the error for an exec the daemon no longer knows although
// this follower saw it start (notFound, the daemon's answer). A daemon
// that started after that moment restarted, and the exec died with the
// one before: runbox.ErrSandboxLost. A daemon up since before it let the
// exited exec go (its retention, or the budget of retained results, passed
// before its end was read): runbox.ErrExecNotFound, never a sandbox
// reported lost while it answers. When Info fails too, the daemon is
// lost.
func (f *follower) forgotten(notFound error) error {
	ctx, cancel := context.WithTimeout(f.ctx, forgottenInfoTimeout)
	defer cancel()
	resp, err := f.c.rpc.Info(ctx, connect.NewRequest(&runboxv1.InfoRequest{}))
	if err != nil {
		return fmt.Errorf("%w: exec %s is gone from the daemon, which does not answer Info either (%v): %v",
			runbox.ErrSandboxLost, f.id, err, notFound)
	}
	up := time.UnixMilli(resp.Msg.GetStartedAtUnixMs())
	if up.After(f.seenAt) {
		return fmt.Errorf("%w: exec %s is gone: the daemon restarted at %s, after the exec started: %v",
			runbox.ErrSandboxLost, f.id, up.UTC().Format(time.RFC3339), notFound)
	}
	return fmt.Errorf("%w: the daemon (up since %s) no longer keeps exec %s: it ended and its result passed the retention or the budget of retained results before it was read: %v",
		runbox.ErrExecNotFound, up.UTC().Format(time.RFC3339), f.id, notFound)
}

// forgottenInfoTimeout bounds the Info call that tells a restarted daemon
// from one that let an exec go.
const forgottenInfoTimeout = 10 * time.Second

// close releases the current stream, if any.
func (f *follower) close() {
	if f.stream != nil {
		f.stream.Close()
		f.stream = nil
	}
}
