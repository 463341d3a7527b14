package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// answering is a live daemon that answers every call with an untagged error
// of one code, the way connect itself reports a failure on the server side
// (a response it could not encode, a message over its read limit).
type answering struct {
	runboxv1connect.UnimplementedRunboxServiceHandler
	code  connect.Code
	calls atomic.Int32
}

func (a *answering) Info(context.Context, *connect.Request[runboxv1.InfoRequest]) (*connect.Response[runboxv1.InfoResponse], error) {
	a.calls.Add(1)
	return nil, connect.NewError(a.code, errors.New("the daemon's own failure"))
}

func (a *answering) Run(context.Context, *connect.Request[runboxv1.RunRequest], *connect.ServerStream[runboxv1.ExecEvent]) error {
	a.calls.Add(1)
	return connect.NewError(a.code, errors.New("the daemon's own failure"))
}

func (a *answering) WriteStdin(context.Context, *connect.Request[runboxv1.WriteStdinRequest]) (*connect.Response[runboxv1.WriteStdinResponse], error) {
	a.calls.Add(1)
	return connect.NewResponse(&runboxv1.WriteStdinResponse{}), nil
}

// serveAnswering serves h on a unix socket, with a read limit of readMax
// bytes (0: none), and returns a client to it.
func serveAnswering(t *testing.T, h *answering, readMax int) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(runboxv1connect.NewRunboxServiceHandler(h, connect.WithReadMaxBytes(readMax)))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := DialUnix(sock, WithSandboxName("sb"))
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLiveDaemonErrorsAreNotLost: an untagged Internal or Unknown error the
// daemon sent (connect.IsWireError) is its answer, reported at once, not a
// transport failure retried until the sandbox is declared lost.
func TestLiveDaemonErrorsAreNotLost(t *testing.T) {
	for _, code := range []connect.Code{connect.CodeInternal, connect.CodeUnknown, connect.CodeInvalidArgument, connect.CodeAlreadyExists} {
		h := &answering{code: code}
		c := serveAnswering(t, h, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.Info(ctx)
		if errors.Is(err, runbox.ErrSandboxLost) || connect.CodeOf(errors.Unwrap(err)) != code {
			t.Errorf("info answered %v: %v; want the daemon's answer, not lost", code, err)
		}
		_, err = c.Exec(ctx, "true")
		if errors.Is(err, runbox.ErrSandboxLost) {
			t.Errorf("run answered %v: %v; want the daemon's answer, not lost", code, err)
		}
		if n := h.calls.Load(); n != 2 {
			t.Errorf("%v: %d calls reached the daemon; want 2 (no retries of an answer)", code, n)
		}
		cancel()
	}
}

// TestUnencodableIsInvalidSpec: a request the client cannot encode is the
// caller's invalid argument, raised before anything is sent; it was
// "sandbox lost: internal: marshal message: string field contains invalid
// UTF-8" after a second and a half of retries.
func TestUnencodableIsInvalidSpec(t *testing.T) {
	h := &answering{code: connect.CodeInternal}
	c := serveAnswering(t, h, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Exec(ctx, "true", WithID("id-\xff"))
	if !errors.Is(err, runbox.ErrInvalidSpec) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("exec id not UTF-8: %v; want ErrInvalidSpec", err)
	}
	// Past the spec check, the codec marks what it cannot encode.
	err = c.Cancel(ctx, "id-\xff", 0)
	if !errors.Is(err, runbox.ErrInvalidSpec) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("cancel of an id that is not UTF-8: %v; want ErrInvalidSpec", err)
	}
	// The files API takes UTF-8 paths: another is an invalid path.
	_, err = c.Stat(ctx, "/tmp/\xff")
	if !errors.Is(err, runbox.ErrInvalidPath) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("stat of a path that is not UTF-8: %v; want ErrInvalidPath", err)
	}
	if n := h.calls.Load(); n != 0 {
		t.Errorf("%d calls reached the daemon; want none", n)
	}
}

// TestMessageOverReadLimitIsTooLarge: a message the daemon refuses for its
// size (connect's ResourceExhausted, untagged) is runbox.ErrTooLarge.
func TestMessageOverReadLimitIsTooLarge(t *testing.T) {
	h := &answering{}
	c := serveAnswering(t, h, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.WriteStdin(ctx, "x", make([]byte, 1000))
	if !errors.Is(err, runbox.ErrTooLarge) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("write over the daemon's read limit: %v; want ErrTooLarge", err)
	}
}
