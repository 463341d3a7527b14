package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/supervisor"
)

// Timing knobs of the server's own lifecycle.
const (
	// shutdownBound bounds the stop protocol for every exec at daemon
	// shutdown, on top of the grace: the supervisor's kill confirmation and
	// slack. Shutdown uses one grace for every exec (not each spec's own),
	// so a SIGTERMed daemon exits promptly and never before its execs are
	// SIGKILLed.
	shutdownBound = 10 * time.Second
	// drainBound is how long open streams get to deliver their final events
	// after every exec has stopped, before connections are closed.
	drainBound = 5 * time.Second
	// lingerAfterLastAnswer is how long connections stay open once every
	// handler has returned, for their last frames to be written, before the
	// server closes them. Without it, a client that keeps an idle
	// connection after the server's GOAWAY (Go's own client does) would
	// hold the daemon for the HTTP/2 server's GOAWAY timeout, a second.
	lingerAfterLastAnswer = 100 * time.Millisecond
)

// Server implements runboxv1connect.RunboxServiceHandler on top of a
// Supervisor.
type Server struct {
	sup *supervisor.Supervisor
	log *slog.Logger

	stopOnce sync.Once
	stop     chan struct{} // closed once a Shutdown RPC has stopped every exec

	holds holdTable // open Hold streams' holds, by id

	extra    []route       // served besides the API (Also)
	stopping chan struct{} // closed once Serve starts stopping
}

// route is a handler at a path prefix.
type route struct {
	path string
	h    http.Handler
}

// Also serves h at path besides the API (a private-network sandbox's
// EgressService); call it before Handler or Serve.
func (s *Server) Also(path string, h http.Handler) { s.extra = append(s.extra, route{path, h}) }

var _ runboxv1connect.RunboxServiceHandler = (*Server)(nil)

// NewServer returns a Server delegating to sup. A nil log discards logs.
func NewServer(sup *supervisor.Supervisor, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{sup: sup, log: log, stop: make(chan struct{}), stopping: make(chan struct{})}
}

// Stopping is closed once Serve starts stopping: handlers of long-lived
// streams served through Also end theirs then, as Serve waits for every
// handler to return.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// Handler returns the HTTP handler serving the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// A message over the limit is refused from its length prefix, before
	// it is read into memory (see runbox.MaxMessageBytes).
	limit := connect.WithReadMaxBytes(runbox.MaxMessageBytes)
	mux.Handle(runboxv1connect.NewRunboxServiceHandler(s, limit))
	mux.Handle(runboxv1connect.NewFilesServiceHandler(newFilesServer(s), limit))
	for _, r := range s.extra {
		mux.Handle(r.path, r.h)
	}
	return withRawOutput(mux)
}

// ShutdownRequested is closed once a Shutdown RPC has stopped every exec:
// the process hosting the server should then stop serving and exit.
func (s *Server) ShutdownRequested() <-chan struct{} { return s.stop }

func (s *Server) requestShutdown() { s.stopOnce.Do(func() { close(s.stop) }) }

// Serve serves the API on ln over HTTP/2 cleartext and HTTP/1 (the runbox
// front's, the Python SDK's local mode's and curl's; see rawoutput.go for
// HTTP/1 Run streams) until ctx is done or a Shutdown RPC arrives. It then stops new
// calls, stops every exec with the stop protocol (runbox.DefaultGrace), lets open
// streams deliver their exit events, and returns nil. It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	var handlers inFlight
	hs := &http.Server{
		Handler:           handlers.wrap(s.Handler()),
		ConnContext:       withConn, // for rawOutput's writes
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		HTTP2: &http.HTTP2Config{
			// Notice clients that vanished without closing their
			// connection, so their handlers return.
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
			// Archives and stdin arrive in frames of up to this size
			// instead of HTTP/2's default 16 KiB.
			MaxReadFrameSize: wire.MaxFrameBytes,
			// Carried egress and forwarded connections stream bulk data
			// to runboxd (see wire.StreamWindowBytes).
			MaxReceiveBufferPerStream:     wire.StreamWindowBytes,
			MaxReceiveBufferPerConnection: wire.ConnWindowBytes,
		},
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	var serveErr error
	select {
	case err := <-served:
		serveErr = fmt.Errorf("serve: %w", err)
		served = nil
	case <-ctx.Done():
		s.log.Info("stopping", "reason", context.Cause(ctx))
	case <-s.stop:
		s.log.Info("stopping", "reason", "shutdown requested")
	}

	close(s.stopping)
	// Refuse new calls (GOAWAY, close the listener) while the execs stop; a
	// stream already open gets its exit event before its connection closes.
	httpDone := make(chan error, 1)
	drainCtx, cancelDrain := context.WithCancel(context.Background())
	defer cancelDrain()
	go func() { httpDone <- hs.Shutdown(drainCtx) }()

	stopCtx, cancelStop := context.WithTimeout(context.Background(), runbox.DefaultGrace+shutdownBound)
	err := s.sup.Shutdown(stopCtx, runbox.DefaultGrace)
	cancelStop()
	if err != nil {
		s.log.Error("stopping execs", "err", err)
	}

	closeAll := func() {
		cancelDrain()
		<-httpDone
		hs.Close()
	}
	select {
	case <-httpDone:
	case <-handlers.idle():
		// Every answer, exit events included, has been handed to its
		// connection: what is still open is idle.
		select {
		case <-httpDone:
		case <-time.After(lingerAfterLastAnswer):
			closeAll()
		}
	case <-time.After(drainBound):
		closeAll()
	}
	if served != nil {
		<-served
	}
	return errors.Join(serveErr, err)
}

// Listen listens on a unix socket at path with mode 0600. A stale socket
// left by a daemon that died is removed; a socket some process still answers
// on is an error, and so is any other file at path.
func Listen(path string) (net.Listener, error) { return ListenMode(path, 0o600) }

// ListenMode is Listen with the socket's mode given: for a daemon whose
// clients run as another user and whose socket's directory already keeps
// out everyone else. A path starting with "@" is a Linux abstract socket
// (a kubernetes sandbox's: nothing in the pod can delete it); mode does not
// apply to it.
func ListenMode(path string, mode os.FileMode) (net.Listener, error) {
	if strings.HasPrefix(path, "@") {
		// An abstract socket (Linux): no file to probe, remove or chmod;
		// it lives as long as the listener, in the network namespace.
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return widenSendBuffers(ln), nil
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen %s: file exists and is not a socket", path)
		}
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("listen %s: another daemon is listening there", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("listen %s: probe existing socket: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return widenSendBuffers(ln), nil
}

// Proxy copies r to the daemon's socket at path and the socket to w, for
// providers whose only way into a sandbox is an exec stream (docker exec).
// It returns when the daemon closes its side or ctx is done; end of input
// half-closes the socket so the daemon sees it.
func Proxy(ctx context.Context, path string, r io.Reader, w io.Writer) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		// Ends at end of input, or when conn is closed by the return below
		// (the process is exiting then, so a read of r left blocked is moot).
		io.Copy(conn, r)
		if uc, ok := conn.(*net.UnixConn); ok {
			uc.CloseWrite()
		}
	}()
	if _, err := io.Copy(w, conn); err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}
