package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
)

// Defaults for Config's zero fields.
const (
	// DefaultTimeout bounds a foreground exec that names no timeout.
	DefaultTimeout = 120 * time.Second
	// DefaultMaxTimeout caps every exec's timeout, and is the timeout of a
	// background exec that names none.
	DefaultMaxTimeout = 30 * time.Minute
	// DefaultOutputBytes is how many bytes of the start and of the end of
	// each stream an exec result keeps (so up to twice this per stream).
	DefaultOutputBytes = 16 << 10
	// DefaultBackgroundBufferBytes is how much of a background exec's
	// latest output exec_output can still return.
	DefaultBackgroundBufferBytes = 1 << 20
	// DefaultProgressInterval spaces the progress notifications of a
	// running exec whose caller asked for progress.
	DefaultProgressInterval = time.Second
	// DefaultCallTimeout bounds every tool call that runs no command (file
	// and sandbox tools, exec_cancel); sandbox_create gets twice as long.
	DefaultCallTimeout = 2 * time.Minute
	// DefaultWait is how long exec waits for its command before it
	// returns the output so far with the command still running: well under
	// the request timeouts of common MCP clients (the TypeScript SDK's is
	// 60 s), so that no command dies because of the client's clock.
	DefaultWait = 30 * time.Second
	// DefaultMaxWait caps exec's and exec_output's wait_seconds.
	DefaultMaxWait = 10 * time.Minute
	// cleanupTimeout bounds the clean-up of one ended MCP session.
	cleanupTimeout = 2 * time.Minute
)

// Config is what a Server does without being asked: its default sandbox
// and its limits. The zero Config is usable.
type Config struct {
	// Provider and Spec describe the default sandbox each MCP session gets
	// on first use ("" is the place's default provider).
	Provider string
	Spec     runbox.SandboxSpec
	// Providers are the providers a model may name in sandbox_create
	// besides Provider; nil offers Provider alone. The caller decides what
	// may be offered (runbox mcp never offers host unless its operator
	// says so; runbox serve offers its operator's list).
	Providers []string
	// Limits are the defaults and ceilings of the sandboxes the sessions
	// make (resources, network modes).
	Limits Limits
	// Sandbox, when set, binds every MCP session to that existing sandbox:
	// it is the session's default and only sandbox, never removed, and
	// sandbox_create and sandbox_remove are not offered.
	Sandbox string
	// Keep keeps the default sandboxes made for sessions when the
	// sessions end.
	Keep bool
	// Timeout is the timeout of a foreground exec that names none
	// (DefaultTimeout); MaxTimeout caps every exec's timeout and is the
	// timeout of a background exec that names none (DefaultMaxTimeout).
	Timeout, MaxTimeout time.Duration
	// Wait is how long exec waits for its command before returning with it
	// still running (DefaultWait); MaxWait caps the wait_seconds of exec
	// and exec_output (DefaultMaxWait).
	Wait, MaxWait time.Duration
	// Grace is the time between SIGTERM and SIGKILL when an exec is
	// stopped (zero: runbox.DefaultGrace).
	Grace time.Duration
	// OutputBytes is how much of the start and of the end of each stream
	// an exec result keeps (DefaultOutputBytes).
	OutputBytes int
	// BackgroundBufferBytes is how much of a background exec's latest
	// output is kept for exec_output (DefaultBackgroundBufferBytes).
	BackgroundBufferBytes int
	// ProgressInterval spaces progress notifications
	// (DefaultProgressInterval).
	ProgressInterval time.Duration
	// CallTimeout bounds tool calls that run no command
	// (DefaultCallTimeout).
	CallTimeout time.Duration
	// Logger receives the server's own diagnostics (never commands'
	// output); nil discards them.
	Logger *slog.Logger
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	c.Timeout = min(c.Timeout, c.MaxTimeout)
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	c.Wait = min(c.Wait, c.MaxWait)
	if c.OutputBytes <= 0 {
		c.OutputBytes = DefaultOutputBytes
	}
	if c.BackgroundBufferBytes <= 0 {
		c.BackgroundBufferBytes = DefaultBackgroundBufferBytes
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	c.Limits = c.Limits.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

// Server serves runbox's MCP tools over one Sandboxes. It keeps a state
// per MCP session and cleans it up when the session ends. It is safe for
// concurrent use by any number of sessions.
type Server struct {
	place Sandboxes
	cfg   Config
	mcp   *mcp.Server

	base    context.Context // ended by Close: every session's context derives from it
	stopAll context.CancelFunc

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	closed   bool
	ending   sync.WaitGroup // sessions being cleaned up
}

// Version is the server version MCP clients are told.
var Version = "dev"

// instructions tell the model how the tools fit together.
const instructions = `runbox runs your shell commands in a sandbox.
- exec runs a command in a persistent shell (cd and export carry over). It waits up to 30 s; a longer command keeps running and the result says so with its exec id: collect the rest with exec_output. A command is stopped, with everything it started, at its timeout (default 120 s).
- For servers and watchers use exec with background: true; exec_cancel stops them.
- file_* tools take absolute paths anywhere in the sandbox, or paths relative to the workspace.
- Without a sandbox argument every tool uses this session's sandbox, made on first use.`

// New returns a Server whose tools work on place as cfg says.
func New(place Sandboxes, cfg Config) *Server {
	cfg = cfg.withDefaults()
	base, stop := context.WithCancel(context.Background())
	s := &Server{place: place, cfg: cfg, base: base, stopAll: stop, sessions: make(map[*mcp.ServerSession]*session)}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "runbox", Title: "runbox sandbox", Version: Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: cfg.Logger,
			// No logging capability: the server sends no log messages.
			Capabilities: &mcp.ServerCapabilities{}})
	s.addExecTools()
	s.addFileTools()
	s.addSandboxTools()
	s.addPortTools()
	s.addNetworkTools()
	s.addBranchTools()
	return s
}

// MCP returns the SDK server, for transports this package does not wire
// (an in-memory pair in tests, say).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one MCP session on t until the client ends it or ctx ends,
// then cleans up after it (see Close) and returns.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	// When ctx ends (runbox mcp got SIGTERM), stop what the calls run at
	// once: the SDK closes the session only once its calls have returned.
	stop := context.AfterFunc(ctx, s.cancelCalls)
	defer stop()
	err := s.mcp.Run(ctx, t)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if cerr := s.Close(cctx); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // asked to stop: not a failure
	}
	return err
}

// RunIO serves one MCP session on newline-delimited JSON-RPC over r and w
// (a process's stdin and stdout). When r ends (the client closed it) every
// call in progress is cancelled at once, its commands stopped with the stop
// protocol, and the session cleaned up.
func (s *Server) RunIO(ctx context.Context, r io.ReadCloser, w io.WriteCloser) error {
	// When the client is gone, cancel what its calls run now, rather than
	// after each call's timeout.
	in := &eofReader{r: r, onEnd: s.cancelCalls}
	return s.Run(ctx, &mcp.IOTransport{Reader: in, Writer: w})
}

// cancelCalls ends every session's context: the calls in progress stop
// their commands (stop protocol) and return, and background execs are
// cancelled. The sessions are cleaned up when the SDK closes them.
func (s *Server) cancelCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sessions {
		st.cancel()
	}
}

// eofReader calls onEnd once when a read fails (end of input).
type eofReader struct {
	r     io.ReadCloser
	onEnd func()
	once  sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(e.onEnd)
	}
	return n, err
}

func (e *eofReader) Close() error { return e.r.Close() }

// Close ends every MCP session of the server: calls in progress are
// cancelled (their commands stopped with the stop protocol), background
// execs cancelled, shell sessions forgotten, and the sandboxes the
// sessions made removed unless kept. It returns when that is done or ctx
// ends. New sessions are refused afterwards.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	all := make([]*session, 0, len(s.sessions))
	for _, st := range s.sessions {
		all = append(all, st)
	}
	s.mu.Unlock()
	s.cancelCalls()
	done := make(chan struct{})
	go func() {
		// Closing a session waits for its calls in progress; then its
		// Wait returns and its state is cleaned up (sessionFor).
		var closing sync.WaitGroup
		for ss := range s.mcp.Sessions() {
			closing.Go(func() { _ = ss.Close() })
		}
		closing.Wait()
		for _, st := range all {
			s.endSession(st)
		}
		s.ending.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.stopAll()
		return nil
	case <-ctx.Done():
		s.stopAll()
		return fmt.Errorf("close mcp server: sessions still cleaning up: %w", ctx.Err())
	}
}

// endSessionByID ends the MCP session with the given id (an HTTP
// session's Mcp-Session-Id) at once, as Close does for all; false when
// there is none.
func (s *Server) endSessionByID(id string) bool {
	s.mu.Lock()
	var found *session
	for ss, st := range s.sessions {
		if id != "" && ss.ID() == id {
			found = st
		}
	}
	s.mu.Unlock()
	if found == nil {
		return false
	}
	found.cancel()
	return true
}

// sessionFor returns the state of the MCP session ss, made on its first
// call, or an error once the server is closed.
func (s *Server) sessionFor(ss *mcp.ServerSession) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		return st, nil
	}
	if s.closed {
		return nil, errors.New("the runbox MCP server is shutting down")
	}
	st := newSession(s)
	s.sessions[ss] = st
	s.ending.Add(1)
	go func() {
		// The SDK's Wait returns once the session has closed and its calls
		// in progress have returned.
		_ = ss.Wait()
		s.endSession(st)
	}()
	return st, nil
}

// endSession cleans up after st once (later calls wait for nothing).
func (s *Server) endSession(st *session) {
	st.endOnce.Do(func() {
		defer s.ending.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.base), cleanupTimeout)
		defer cancel()
		st.end(ctx)
		s.mu.Lock()
		for ss, other := range s.sessions {
			if other == st {
				delete(s.sessions, ss)
			}
		}
		s.mu.Unlock()
	})
}
