package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// These tests need no daemon: they check how the client reads the errors
// the daemon (through package wire) and the transport produce.

func TestDaemonErrorsMapToSentinels(t *testing.T) {
	c := &Client{sandbox: "sb"}
	for _, sentinel := range []error{
		runbox.ErrCancelled, runbox.ErrExecNotFound, runbox.ErrInvalidSpec,
		runbox.ErrSpawn, runbox.ErrNotRunning, runbox.ErrSessionNotFound,
	} {
		daemonErr := wire.ToConnectError(fmt.Errorf("start exec x1: %w", sentinel))
		err := c.opError("exec", "x1", context.Background(), daemonErr)
		if !errors.Is(err, sentinel) {
			t.Errorf("%v came back as %v", sentinel, err)
		}
		if errors.Is(err, runbox.ErrSandboxLost) || transient(daemonErr) {
			t.Errorf("%v: a daemon's answer must not count as a transport failure", sentinel)
		}
		re, ok := errors.AsType[*runbox.Error](err)
		if !ok || re.Op != "exec" || re.Sandbox != "sb" || re.Exec != "x1" {
			t.Errorf("%v: got %#v", sentinel, err)
		}
		if want := "exec sandbox sb exec x1: start exec x1: " + sentinel.Error(); err.Error() != want {
			t.Errorf("message %q, want %q", err.Error(), want)
		}
	}
	// A daemon failure with no sentinel is neither lost nor retried.
	daemonErr := wire.ToConnectError(errors.New("disk on fire"))
	if err := cause(context.Background(), daemonErr); errors.Is(err, runbox.ErrSandboxLost) || transient(daemonErr) {
		t.Errorf("untyped daemon error mapped to %v", err)
	}
}

func TestTransportErrorsAreSandboxLost(t *testing.T) {
	for _, err := range []error{
		connect.NewError(connect.CodeUnavailable, syscall.ECONNREFUSED),
		connect.NewError(connect.CodeInternal, fmt.Errorf("protocol error: %w", io.ErrUnexpectedEOF)),
		connect.NewError(connect.CodeUnknown, syscall.ECONNRESET),
	} {
		if !transient(err) {
			t.Errorf("%v is not transient", err)
		}
		if got := cause(context.Background(), err); !errors.Is(got, runbox.ErrSandboxLost) {
			t.Errorf("%v mapped to %v, want ErrSandboxLost", err, got)
		}
	}
	if transient(connect.NewError(connect.CodeUnimplemented, errors.New("404"))) {
		t.Error("talking to something that is not runboxd is not worth retrying")
	}
}

func TestCallerContextWins(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := cause(ctx, connect.NewError(connect.CodeCanceled, context.Canceled))
	if !errors.Is(err, context.Canceled) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	// The client's own errors pass through unchanged.
	if got := cause(nil, context.DeadlineExceeded); got != context.DeadlineExceeded {
		t.Errorf("got %v", got)
	}
	lost := fmt.Errorf("%w: x", runbox.ErrSandboxLost)
	if got := (&Client{}).opError("exec", "", nil, lost); !errors.Is(got, runbox.ErrSandboxLost) {
		t.Errorf("got %v", got)
	}
}

func TestRetryGivesUpAfterWindow(t *testing.T) {
	f := &follower{c: &Client{window: 150 * time.Millisecond}, id: "x", ctx: context.Background()}
	broken := connect.NewError(connect.CodeUnavailable, syscall.ECONNREFUSED)
	var brokeAt time.Time
	backoff := minBackoff
	tries := 0
	var err error
	for err == nil {
		tries++
		err = f.retry(broken, &brokeAt, &backoff)
		if tries > 100 {
			t.Fatal("retry never gave up")
		}
	}
	if !errors.Is(err, runbox.ErrSandboxLost) || tries < 2 {
		t.Errorf("after %d tries: %v, want ErrSandboxLost after retrying", tries, err)
	}
	if backoff > maxBackoff {
		t.Errorf("backoff grew to %v", backoff)
	}
}

func TestRetryReadsDaemonAnswers(t *testing.T) {
	notFound := wire.ToConnectError(fmt.Errorf("exec x: %w", runbox.ErrExecNotFound))
	f := &follower{c: &Client{window: time.Second}, id: "x", ctx: context.Background()}
	var brokeAt time.Time
	backoff := minBackoff
	if err := f.retry(notFound, &brokeAt, &backoff); err != notFound {
		t.Errorf("an exec never seen: got %v, want the daemon's answer", err)
	}
	// An exec seen before that the daemon no longer knows: restarted or
	// forgotten, as the daemon's Info tells (TestForgottenExecIsNotALostSandbox,
	// TestRestartedDaemonIsALostSandbox).
	// A stream ended by its own context reports the context's cause.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNoResult)
	f.ctx = ctx
	if err := f.retry(connect.NewError(connect.CodeCanceled, context.Canceled), &brokeAt, &backoff); err != errNoResult {
		t.Errorf("got %v, want %v", err, errNoResult)
	}
}
