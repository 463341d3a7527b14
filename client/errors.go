package client

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// errStreamEnded is why a stream that closed cleanly before the exec's exit
// event is retried: the daemon never ends a stream early on purpose.
var errStreamEnded = errors.New("stream ended before the exec's exit event")

// remoteError is an error the daemon reported: its message, unwrapping to
// the sentinel the daemon's Runbox-Error metadata named.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// cause maps a call's error to what a *runbox.Error carries:
//   - an error the daemon tagged: its sentinel (with the daemon's message);
//   - a request the client could not encode: runbox.ErrInvalidSpec (nothing
//     was sent);
//   - a message the daemon refused for its size before reading it:
//     runbox.ErrTooLarge;
//   - ctx ended (the caller gave up): ctx's error;
//   - a transport failure (connection refused or broken, unavailable):
//     runbox.ErrSandboxLost with the failure as cause;
//   - anything else unchanged (an untagged error the daemon itself sent
//     among them: it answered, so it is not lost).
func cause(ctx context.Context, err error) error {
	if sentinel, msg, tagged := wire.FromConnectError(err); tagged {
		if sentinel == nil {
			return errors.New(msg)
		}
		return &remoteError{sentinel: sentinel, msg: msg}
	}
	if errors.Is(err, errUnencodable) {
		return fmt.Errorf("%w: %v", runbox.ErrInvalidSpec, err)
	}
	if connect.CodeOf(err) == connect.CodeResourceExhausted {
		return fmt.Errorf("%w: %v (the limit is runbox.MaxMessageBytes)", runbox.ErrTooLarge, err)
	}
	if ctx != nil && ctx.Err() != nil {
		if c := context.Cause(ctx); errors.Is(c, errClientClosed) {
			return c
		}
		return ctx.Err()
	}
	if _, ok := errors.AsType[*connect.Error](err); !ok {
		return err // the client's own: a context's error or cause, or ErrSandboxLost
	}
	if errors.Is(err, runbox.ErrUnauthenticated) {
		return unauthenticated(err)
	}
	if errors.Is(err, runbox.ErrSandboxPaused) {
		// The dialer found the whole sandbox frozen (docker's pause):
		// its runboxd cannot answer, and retrying will not help.
		if ce, ok := errors.AsType[*connect.Error](err); ok {
			return ce.Unwrap()
		}
		return err
	}
	if transient(err) {
		if ce, ok := errors.AsType[*connect.Error](err); ok && errors.Is(ce.Unwrap(), runbox.ErrSandboxLost) {
			// The dialer already said the sandbox is lost, and why: say
			// it once ("sandbox lost: container gone"), not wrapped in
			// the transport's words ("sandbox lost: unavailable: sandbox
			// lost: container gone").
			return ce.Unwrap()
		}
		return fmt.Errorf("%w: %v", runbox.ErrSandboxLost, err)
	}
	return err
}

// transient reports whether err is a failure of the connection rather than
// an answer from the daemon, so the call may be retried on a new one. It is
// only consulted while the call's own context is live, so Canceled and
// DeadlineExceeded here come from the other side or the transport.
//
// An answer is never transient: a tagged error, a request the client could
// not encode, or an error the daemon sent (connect.IsWireError) with a code
// other than Unavailable (which a stopping daemon sends). Untagged Internal
// and Unknown errors the client made itself are transient: they are how
// connect reports a connection that broke mid-message.
func transient(err error) bool {
	if _, _, tagged := wire.FromConnectError(err); tagged {
		return false
	}
	if errors.Is(err, errUnencodable) {
		return false
	}
	if errors.Is(err, runbox.ErrUnauthenticated) {
		return false // the daemon refused the secret (auth): a new connection will not help
	}
	if errors.Is(err, runbox.ErrSandboxPaused) {
		return false // the sandbox is frozen until resumed
	}
	if errors.Is(err, errStreamEnded) {
		return true
	}
	code := connect.CodeOf(err) // CodeUnknown for errors that are not connect's
	if connect.IsWireError(err) && code != connect.CodeUnavailable {
		return false
	}
	switch code {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeInternal,
		connect.CodeAborted, connect.CodeCanceled, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}

// unauthenticated returns the innermost error of err's chain that wraps
// runbox.ErrUnauthenticated (the dialer's, which says why), without the
// transport's wrapping around it. (auth: a refused secret is never
// ErrSandboxLost.)
func unauthenticated(err error) error {
	found := err
	for e := err; e != nil && e != runbox.ErrUnauthenticated; e = errors.Unwrap(e) {
		if errors.Is(e, runbox.ErrUnauthenticated) {
			found = e
		}
	}
	return found
}
