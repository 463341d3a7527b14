// Package client is the wire client of runboxd, the supervisor daemon inside
// every runbox sandbox. It turns the runbox.v1 API into agent-level calls —
// [Client.Exec], [Client.Start], [Client.Attach], [Client.Cancel] — and maps
// infrastructure failure to typed errors.
//
// A Result with a non-zero exit code is not an error. Errors are
// *runbox.Error values wrapping one of the root package's sentinels, so
// errors.Is works: runbox.ErrSandboxLost when the daemon cannot be reached
// (never an exit code), runbox.ErrExecNotFound, runbox.ErrCancelled,
// runbox.ErrInvalidSpec, runbox.ErrSpawn, runbox.ErrNotRunning.
//
// The client speaks HTTP/2 cleartext over whatever byte stream the
// [runbox.Dialer] opens (a unix socket, a docker exec pipe, an SSH channel),
// and survives that stream breaking: exec ids are chosen by the client, so a
// Run interrupted before its started event is re-issued with the same id (the
// daemon attaches instead of running it twice), and a stream broken after it
// re-attaches from the last output sequence number seen, so output is
// delivered exactly once. It gives up with runbox.ErrSandboxLost after the
// reconnect window.
//
// The client does not enforce timeouts itself: the daemon does, on its own
// clock, and the client's transport deadline is always later.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/wiretime"
)

// Timing knobs.
const (
	// DefaultReconnectWindow is how long a broken stream is retried before
	// the sandbox is declared lost: long enough to ride out a dropped
	// connection, short enough that a dead sandbox is reported promptly.
	DefaultReconnectWindow = 1500 * time.Millisecond
	// streamHeadroom is added to an exec's timeout+grace for the transport
	// deadline, so the daemon's own deadline always fires first and the
	// result says timed_out instead of the call failing.
	streamHeadroom = 5 * time.Second
	// cancelHeadroom bounds a Cancel sent because the caller's context
	// ended, on top of the exec's grace; then the stream gets as long again
	// to deliver the exit event before the sandbox is declared lost.
	cancelHeadroom = 5 * time.Second
	// maxOverdue bounds how long past those deadlines a client waits for an
	// exec's result while the daemon still answers and still has the exec
	// (busy stopping a fork bomb on a loaded machine, say).
	maxOverdue = time.Minute
	// minBackoff and maxBackoff space reconnect attempts.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 400 * time.Millisecond
	// pingAfter and pingTimeout detect a half-dead connection (the peer
	// vanished without closing it): after pingAfter without a frame the
	// client pings, and closes the connection if no answer comes within
	// pingTimeout, which breaks its streams so they reconnect.
	pingAfter   = 5 * time.Second
	pingTimeout = 5 * time.Second
	// idleConnTimeout closes a connection no call has used for this long.
	idleConnTimeout = 90 * time.Second
)

// baseURL is the URL the API is served at; the host is never resolved, as
// every connection comes from the Dialer.
const baseURL = "http://runboxd"

// errClientClosed is the cause of calls cut short by Client.Close.
var errClientClosed = fmt.Errorf("client closed: %w", net.ErrClosed)

// Client talks to one sandbox's runboxd. It is safe for concurrent use.
type Client struct {
	rpc runboxv1connect.RunboxServiceClient
	// files is made on first use: making a service's client reads its
	// whole proto file's descriptors, which an exec never needs
	// (docs/performance.md).
	files     func() runboxv1connect.FilesServiceClient
	transport *http.Transport
	// refused holds the daemon's refusal of a connection, once seen.
	refused   *refusal
	sandbox   string
	window    time.Duration
	headroom  time.Duration   // streamHeadroom, shorter in tests
	overdue   time.Duration   // maxOverdue, shorter in tests
	base      context.Context // ended by Close; every stream derives from it
	closeBase context.CancelCauseFunc
}

// Option configures a Client.
type Option func(*options)

type options struct {
	sandbox                string
	window                 time.Duration
	pingAfter, pingTimeout time.Duration
	headroom, maxOverdue   time.Duration
	tls                    *tls.Config // NewRemote over https
}

// WithSandboxName names the sandbox in errors.
func WithSandboxName(name string) Option { return func(o *options) { o.sandbox = name } }

// WithReconnectWindow sets how long a broken stream is retried before the
// call fails with runbox.ErrSandboxLost; d <= 0 keeps
// DefaultReconnectWindow.
func WithReconnectWindow(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.window = d
		}
	}
}

// New returns a Client that reaches runboxd through connections from dial,
// speaking the Connect protocol over HTTP/2 cleartext. It dials lazily, and
// again whenever a connection breaks. dial's context bounds the dial only.
func New(dial runbox.Dialer, opts ...Option) *Client {
	o := options{window: DefaultReconnectWindow, pingAfter: pingAfter, pingTimeout: pingTimeout,
		headroom: streamHeadroom, maxOverdue: maxOverdue}
	for _, opt := range opts {
		opt(&o)
	}
	refused := &refusal{}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	t := &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			return daemonauth.DetectRefusal(conn, refused.store), nil
		},
		IdleConnTimeout: idleConnTimeout,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: o.pingAfter,
			PingTimeout:     o.pingTimeout,
			// Output arrives in frames of up to this size instead of
			// HTTP/2's default 16 KiB: fewer frames to read and copy per
			// byte of a command's output (docs/performance.md).
			MaxReadFrameSize: wire.MaxFrameBytes,
		},
	}
	base, closeBase := context.WithCancelCause(context.Background())
	return &Client{
		rpc: runboxv1connect.NewRunboxServiceClient(&http.Client{Transport: t}, baseURL,
			// Output is mostly small chunks on a local stream: compressing
			// it costs more than it saves.
			connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(protoCodec{})),
		files: sync.OnceValue(func() runboxv1connect.FilesServiceClient {
			return runboxv1connect.NewFilesServiceClient(&http.Client{Transport: t}, baseURL,
				connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(protoCodec{}))
		}),
		transport: t,
		refused:   refused,
		sandbox:   o.sandbox,
		window:    o.window,
		headroom:  o.headroom,
		overdue:   o.maxOverdue,
		base:      base,
		closeBase: closeBase,
	}
}

// DialUnix returns a Client for the runboxd listening on a unix socket,
// without authentication: only a daemon run with --insecure-no-auth (tests)
// or an in-process server answers it. A sandbox's runboxd serves only
// connections that start with its secret: reach it through its provider's
// Dialer, which holds the secret (auth); without one, calls fail with
// runbox.ErrUnauthenticated.
func DialUnix(socketPath string, opts ...Option) *Client {
	return New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socketPath)
	}, opts...)
}

// Close ends every stream of the client (Wait, Attach and Output calls in
// progress fail) and closes its connections. Execs keep running on the
// daemon. It always returns nil.
func (c *Client) Close() error {
	c.closeBase(errClientClosed)
	c.transport.CloseIdleConnections()
	return nil
}

// callContext bounds a unary call by ctx and by Close.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.base, func() { cancel(context.Cause(c.base)) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// Cancel stops the exec with id through the stop protocol (grace zero means
// the exec's own grace, runbox.NoGrace SIGKILL at once) and returns once it
// has stopped. It is idempotent; for an id not yet started it leaves a
// tombstone, so a later run with that id is refused with runbox.ErrCancelled.
func (c *Client) Cancel(ctx context.Context, id string, grace time.Duration) error {
	_, err := c.CancelKnown(ctx, id, grace)
	return err
}

// CancelKnown is Cancel that also reports whether the daemon knew the id:
// false means no such exec ran and a tombstone was left for it.
func (c *Client) CancelKnown(ctx context.Context, id string, grace time.Duration) (known bool, err error) {
	if grace > runbox.MaxGrace {
		return false, c.opError("cancel", id, nil, runbox.CheckMs("grace", grace.Milliseconds(), runbox.MaxGrace, "runbox.MaxGrace", true))
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.rpc.Cancel(ctx, connect.NewRequest(&runboxv1.CancelRequest{Id: id, GraceMs: wiretime.GraceToMs(grace)}))
	if err != nil {
		return false, c.opError("cancel", id, ctx, err)
	}
	return resp.Msg.GetKnown(), nil
}

// Signal sends sig to every live process of the exec with id and returns how
// many were signalled.
func (c *Client) Signal(ctx context.Context, id string, sig syscall.Signal) (int, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.rpc.Signal(ctx, connect.NewRequest(&runboxv1.SignalRequest{Id: id, Signal: int32(sig)}))
	if err != nil {
		return 0, c.opError("signal", id, ctx, err)
	}
	return int(resp.Msg.GetSignalled()), nil
}

// WriteStdin writes p to the stdin of the exec with id, which must have been
// started WithStdinStream or WithPTY.
//
// p may be of any size: it is sent in messages of at most
// runbox.MaxStdinChunkBytes.
func (c *Client) WriteStdin(ctx context.Context, id string, p []byte) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	for {
		chunk := p[:min(len(p), runbox.MaxStdinChunkBytes)]
		_, err := c.rpc.WriteStdin(ctx, connect.NewRequest(&runboxv1.WriteStdinRequest{Id: id, Data: chunk}))
		if err != nil {
			return c.opError("write stdin", id, ctx, err)
		}
		if p = p[len(chunk):]; len(p) == 0 {
			return nil
		}
	}
}

// CloseStdin closes the stdin of the exec with id.
func (c *Client) CloseStdin(ctx context.Context, id string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.rpc.CloseStdin(ctx, connect.NewRequest(&runboxv1.CloseStdinRequest{Id: id}))
	return c.opError("close stdin", id, ctx, err)
}

// Resize changes the terminal size of the exec with id, which must have been
// started WithPTY.
func (c *Client) Resize(ctx context.Context, id string, rows, cols uint16) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.rpc.Resize(ctx, connect.NewRequest(&runboxv1.ResizeRequest{Id: id, Rows: uint32(rows), Cols: uint32(cols)}))
	return c.opError("resize", id, ctx, err)
}

// ListOption changes what List asks the daemon for.
type ListOption func(*runboxv1.ListRequest)

// ListWithoutOutput leaves each exec's stdout and stderr out of what List
// returns (Result.Stdout and Result.Stderr are empty; exit codes, states,
// the dropped counts and live processes still come). The daemon keeps up
// to tens of MiB of retained output; a List that only looks at states and
// exit codes should not fetch it.
func ListWithoutOutput() ListOption {
	return func(r *runboxv1.ListRequest) { r.OmitOutput = true }
}

// List describes every exec the daemon keeps, oldest first, each retained
// result with its output unless ListWithoutOutput is given.
func (c *Client) List(ctx context.Context, opts ...ListOption) ([]runbox.ExecInfo, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req := &runboxv1.ListRequest{}
	for _, o := range opts {
		o(req)
	}
	resp, err := c.rpc.List(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, c.opError("list", "", ctx, err)
	}
	infos := make([]runbox.ExecInfo, len(resp.Msg.GetExecs()))
	for i, e := range resp.Msg.GetExecs() {
		infos[i] = wire.ExecInfoFromProto(e)
	}
	return infos, nil
}

// Sessions describes the daemon's shell sessions, by name.
func (c *Client) Sessions(ctx context.Context) ([]runbox.SessionInfo, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.rpc.ListSessions(ctx, connect.NewRequest(&runboxv1.ListSessionsRequest{}))
	if err != nil {
		return nil, c.opError("list sessions", "", ctx, err)
	}
	infos := make([]runbox.SessionInfo, len(resp.Msg.GetSessions()))
	for i, ss := range resp.Msg.GetSessions() {
		infos[i] = wire.SessionFromProto(ss)
	}
	return infos, nil
}

// DeleteSession forgets the shell session name; runbox.ErrSessionNotFound
// when there is none.
func (c *Client) DeleteSession(ctx context.Context, name string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.rpc.DeleteSession(ctx, connect.NewRequest(&runboxv1.DeleteSessionRequest{Name: name}))
	return c.opError("delete session", "", ctx, err)
}

// Info describes the daemon. It is the cheapest call that proves the daemon
// answers.
func (c *Client) Info(ctx context.Context) (runbox.DaemonInfo, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.rpc.Info(ctx, connect.NewRequest(&runboxv1.InfoRequest{}))
	if err != nil {
		return runbox.DaemonInfo{}, c.opError("info", "", ctx, err)
	}
	return wire.DaemonInfoFromProto(resp.Msg), nil
}

// Shutdown stops every exec with the stop protocol, with one grace for all
// (zero means runbox.DefaultGrace), and then ends the daemon. It returns once every exec has
// stopped; the daemon exits shortly after.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) error {
	if grace > runbox.MaxGrace || grace < 0 {
		return c.opError("shutdown", "", nil, runbox.CheckMs("grace", grace.Milliseconds(), runbox.MaxGrace, "runbox.MaxGrace", false))
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req := connect.NewRequest(&runboxv1.ShutdownRequest{GraceMs: wiretime.DurationToMs(grace)})
	// The daemon is going away: this call's connection closes as soon as
	// its last stream ends, and the client's idle ones after the answer.
	// (Closing idle connections alone can come a moment too early for this
	// one, and the daemon would then wait a second for it before exiting.)
	req.Header().Set("Connection", "close")
	_, err := c.rpc.Shutdown(ctx, req)
	if err != nil {
		return c.opError("shutdown", "", ctx, err)
	}
	c.transport.CloseIdleConnections()
	return nil
}

// Pause freezes every process of the sandbox's execs and stops their
// deadlines and idle timeouts; runboxd keeps answering (Info says Paused)
// and refuses new execs with runbox.ErrSandboxPaused. Pausing a paused
// sandbox is not an error. Providers whose pause freezes more than the
// commands (docker's) pause through the provider instead (see
// runbox.Pauser).
func (c *Client) Pause(ctx context.Context) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.rpc.Pause(ctx, connect.NewRequest(&runboxv1.PauseRequest{}))
	return c.opError("pause", "", ctx, err)
}

// Resume thaws what Pause froze: execs go on, each with the time it had
// left before its deadline. Resuming a running sandbox is not an error.
func (c *Client) Resume(ctx context.Context) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	_, err := c.rpc.Resume(ctx, connect.NewRequest(&runboxv1.ResumeRequest{}))
	return c.opError("resume", "", ctx, err)
}

// opError wraps err, a failed call's error, as a *runbox.Error (see cause).
func (c *Client) opError(op, exec string, ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*runbox.Error](err); ok {
		return err
	}
	return &runbox.Error{Op: op, Sandbox: c.sandbox, Exec: exec, Err: c.refused.instead(cause(ctx, err))}
}

// refusal keeps the daemon's refusal of a connection (no secret), once one
// was seen: the transport may report that connection's failure without its
// cause, as a broken stream, which must not read as a lost sandbox.
type refusal struct{ err atomic.Pointer[error] }

func (r *refusal) store(err error) { r.err.Store(&err) }

// get returns the refusal seen, or nil (also for a nil refusal).
func (r *refusal) get() error {
	if r == nil {
		return nil
	}
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

// instead returns the refusal in place of err when err says the sandbox is
// lost and a refusal was seen; else err.
func (r *refusal) instead(err error) error {
	if refusal := r.get(); refusal != nil && errors.Is(err, runbox.ErrSandboxLost) {
		return refusal
	}
	return err
}
