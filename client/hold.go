package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// errReleased is the cause a Hold's stream is cancelled with by Release.
var errReleased = errors.New("hold released")

// Hold is a hold on a sandbox's commands (Client.Hold): they stay frozen
// until Release, whatever the sandbox's user pauses or resumes meanwhile.
// It is tied to a stream to runboxd, so a holder that dies (or closes its
// Client) releases it with its connection.
type Hold struct {
	c      *Client
	id     string
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once the stream has ended
	err    error         // why the stream ended; set before done closes
	paused bool
	once   sync.Once
	relErr error // Release's answer
}

// Hold freezes every process of the sandbox's execs, as Pause does, and
// returns once they are frozen; they stay frozen until Release (or until
// the hold is lost: Lost). Unlike Pause it is not the user's pause: a
// Resume meanwhile does not thaw them, and a Pause meanwhile keeps them
// frozen after Release. ctx bounds getting the hold, not how long it
// lasts; reason is logged by runboxd. New execs are refused with
// runbox.ErrSandboxPaused while it stands. A runboxd older than holds
// answers runbox.ErrUnsupported.
func (c *Client) Hold(ctx context.Context, reason string) (*Hold, error) {
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(c.base, func() { cancel(context.Cause(c.base)) })
	h := &Hold{c: c, cancel: func(cause error) { stop(); cancel(cause) }, done: make(chan struct{})}
	stream, err := c.rpc.Hold(sctx, connect.NewRequest(&runboxv1.HoldRequest{Reason: reason}))
	if err != nil {
		h.cancel(err)
		return nil, c.opError("hold", "", ctx, holdError(err))
	}
	got := make(chan bool, 1)
	go func() { got <- stream.Receive() }()
	select {
	case ok := <-got:
		if !ok {
			err := stream.Err()
			if err == nil {
				err = fmt.Errorf("%w: runboxd ended the hold before holding", errStreamEnded)
			}
			stream.Close()
			h.cancel(err)
			return nil, c.opError("hold", "", ctx, holdError(err))
		}
	case <-ctx.Done():
		h.cancel(context.Cause(ctx))
		<-got
		stream.Close()
		return nil, c.opError("hold", "", ctx, context.Cause(ctx))
	}
	h.paused, h.id = stream.Msg().GetPaused(), stream.Msg().GetId()
	go func() {
		defer close(h.done)
		for stream.Receive() {
		}
		err := stream.Err()
		stream.Close()
		if err == nil {
			err = errors.New("runboxd ended it")
		}
		h.err = err
	}()
	return h, nil
}

// holdError is err, Hold's failure, as runbox.ErrUnsupported when the
// runboxd is from before holds (a sandbox made by an older runbox), so
// the caller may pause instead.
func holdError(err error) error {
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return fmt.Errorf("runboxd has no holds (older than this client): %w", runbox.ErrUnsupported)
	}
	return err
}

// Paused reports whether the sandbox's user had paused it when the hold
// began (it then stays paused after Release).
func (h *Hold) Paused() bool { return h.paused }

// Lost is closed when the hold's stream has ended: after Release, or
// before it when the stream to runboxd broke (the sandbox may then have
// been thawed; Release then says so).
func (h *Hold) Lost() <-chan struct{} { return h.done }

// releaseBound bounds Release's call to runboxd: a thaw is a write per
// exec's cgroup (or a signal per process), and runboxd answers it at once.
const releaseBound = 30 * time.Second

// Release ends the hold and returns once runboxd has thawed the commands
// (unless the user's pause or another hold stands: then they stay
// frozen). It returns nil when the hold stood until Release, or an error
// wrapping runbox.ErrSandboxLost when it had ended before (its stream
// broke: the commands may have run meanwhile), so a caller that copied
// the sandbox under it learns whether the copy is consistent. It is
// idempotent.
func (h *Hold) Release() error {
	h.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseBound)
		defer cancel()
		resp, err := h.c.rpc.ReleaseHold(ctx, connect.NewRequest(&runboxv1.ReleaseHoldRequest{Id: h.id}))
		h.cancel(errReleased)
		<-h.done
		switch {
		case err != nil:
			h.relErr = h.c.opError("release hold", "", ctx, err)
		case !resp.Msg.GetHeld():
			h.relErr = &runbox.Error{Op: "hold", Sandbox: h.c.sandbox, Err: fmt.Errorf("%w: the hold ended before its release: %v", runbox.ErrSandboxLost, h.err)}
		}
	})
	return h.relErr
}

// Drop ends the hold without asking runboxd: its stream is closed and
// runboxd releases the hold when it reads that, so the commands may stay
// frozen a moment after Drop returns. It is for a runboxd that cannot
// answer now (docker's pause freezes the whole container, runboxd
// included; it then releases the hold once thawed). It returns nil when
// the stream stood until Drop, or the error that had ended it before (the
// commands may have run meanwhile). Release and Drop are one: whichever
// is called first decides.
func (h *Hold) Drop() error {
	h.once.Do(func() {
		select {
		case <-h.done:
			h.relErr = &runbox.Error{Op: "hold", Sandbox: h.c.sandbox, Err: fmt.Errorf("%w: the hold ended before its release: %v", runbox.ErrSandboxLost, h.err)}
		default:
			h.cancel(errReleased)
			<-h.done
		}
	})
	return h.relErr
}
