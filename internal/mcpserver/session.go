package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// session is what one MCP session holds: its default sandbox, the sandboxes
// it used and made, its background execs.
type session struct {
	srv *Server
	// shell names this session's persistent shell session in every
	// sandbox it uses.
	shell string
	// ctx ends when the MCP session ends: calls in progress and background
	// execs derive from it.
	ctx     context.Context
	cancel  context.CancelFunc
	calls   sync.WaitGroup // calls in progress
	endOnce sync.Once

	// defMu serialises making the default sandbox.
	defMu sync.Mutex

	mu        sync.Mutex
	closed    bool
	def       string                 // the default sandbox's id; "" until made or found
	mine      map[string]*owned      // the sandboxes this session may see and use, by id
	sandboxes map[string]*sandboxRef // those of them it is connected to, by id
	bg        map[string]*bgExec     // background execs, by exec id
	spills    map[string]bool        // spill files this session was told of
	snaps     map[string]bool        // snapshots this session took (sandbox_snapshot, sandbox_fork)
}

// ownSnapshot records a snapshot this session took: its sandboxes may
// start from it.
func (st *session) ownSnapshot(name string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.snaps[name] = true
}

// checkSnapshot refuses a snapshot this session did not take, as if it did
// not exist: like sandboxes, a model reaches only the snapshots its own
// session made, never the operator's or another session's.
func (st *session) checkSnapshot(name string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.snaps[name] {
		return fmt.Errorf("%w: no snapshot %q taken in this session (sandbox_snapshot or sandbox_fork make one)", runbox.ErrInvalidSpec, name)
	}
	return nil
}

// sandboxRef is a sandbox as one session uses it.
type sandboxRef struct {
	sb runbox.Sandbox
	cl *client.Client
	// made says this session made the sandbox; keep that it stays when the
	// session ends.
	made, keep bool
	// shellUsed says this session's shell session exists in the sandbox.
	shellUsed bool
	// release ends the session's hold on the sandbox (Holder); it does
	// nothing where the place tracks no use.
	release func()

	rootMu sync.Mutex
	root   string // the sandbox's workspace, "" until asked
}

func newSession(s *Server) *session {
	var b [6]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(s.base)
	return &session{
		srv: s, shell: "mcp-" + hex.EncodeToString(b[:]), ctx: ctx, cancel: cancel,
		mine: make(map[string]*owned), sandboxes: make(map[string]*sandboxRef), bg: make(map[string]*bgExec), spills: make(map[string]bool), snaps: make(map[string]bool),
	}
}

// errSessionEnded refuses calls that arrive after the session ended.
var errSessionEnded = errors.New("this MCP session has ended")

// begin registers a call in progress and returns its context, which ends
// with ctx or with the session; call done when the call returns.
func (st *session) begin(ctx context.Context) (context.Context, func(), error) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, nil, errSessionEnded
	}
	st.calls.Add(1)
	st.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(st.ctx, cancel)
	return ctx, func() { stop(); cancel(); st.calls.Done() }, nil
}

// sandbox returns the sandbox key names ("" for the session's default,
// made on first use), connected. key must name one of the session's own
// sandboxes (see find): any other is not found, whether it exists or not.
func (st *session) sandbox(ctx context.Context, key string) (*sandboxRef, error) {
	if key == "" || st.srv.cfg.Sandbox != "" {
		// Bound to one sandbox: it is the session's only one.
		ref, err := st.defaultSandbox(ctx)
		if err != nil || key == "" || matches(ref.sb, key) {
			return ref, err
		}
		return nil, notFound(key)
	}
	o, err := st.find(key)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	ref := st.sandboxes[o.sb.ID]
	st.mu.Unlock()
	if ref != nil {
		return ref, nil
	}
	// Known but not connected (found lost before): look again.
	sb, err := st.srv.place.Get(ctx, o.sb.ID)
	if err != nil {
		return nil, err
	}
	return st.adopt(ctx, sb, o.made, o.keep)
}

// adopt connects to sb and records it as used by this session (made by it
// when made).
func (st *session) adopt(ctx context.Context, sb runbox.Sandbox, made, keep bool) (*sandboxRef, error) {
	if !sb.Alive {
		why := sb.Detail["lost"]
		if why == "" {
			why = "its runboxd is not answering"
		}
		return nil, fmt.Errorf("%w: %s", runbox.ErrSandboxLost, why)
	}
	st.mu.Lock()
	if ref, ok := st.sandboxes[sb.ID]; ok {
		st.mu.Unlock()
		return ref, nil
	}
	st.mu.Unlock()
	cl, err := st.srv.place.Connect(ctx, sb)
	if err != nil {
		return nil, err
	}
	ref := &sandboxRef{sb: sb, cl: cl, made: made, keep: keep, release: func() {}}
	if h, ok := st.srv.place.(Holder); ok {
		ref.release = h.Hold(sb)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if old, ok := st.sandboxes[sb.ID]; ok { // a concurrent call won
		cl.Close()
		ref.release()
		return old, nil
	}
	st.sandboxes[sb.ID] = ref
	return ref, nil
}

// defaultSandbox returns the session's default sandbox: the configured
// one, or one made for the session on first use.
func (st *session) defaultSandbox(ctx context.Context) (*sandboxRef, error) {
	st.defMu.Lock()
	defer st.defMu.Unlock()
	st.mu.Lock()
	ref := st.sandboxes[st.def]
	st.mu.Unlock()
	if ref != nil {
		return ref, nil
	}
	cfg := st.srv.cfg
	var sb runbox.Sandbox
	var err error
	made := cfg.Sandbox == ""
	if made {
		sb, err = st.srv.place.Create(ctx, cfg.Provider, st.srv.defaultSpec())
		if err != nil {
			return nil, fmt.Errorf("make this session's default sandbox: %w", err)
		}
	} else if sb, err = st.srv.place.Get(ctx, cfg.Sandbox); err != nil {
		return nil, fmt.Errorf("the configured sandbox %s: %w", cfg.Sandbox, err)
	}
	st.own(sb, made, cfg.Keep)
	ref, err = st.adopt(ctx, sb, made, cfg.Keep)
	if err != nil {
		if made {
			st.disown(sb.ID)
			st.removeQuietly(sb)
		}
		return nil, err
	}
	st.mu.Lock()
	st.def = sb.ID
	st.mu.Unlock()
	return ref, nil
}

// removeQuietly removes a sandbox this session made and cannot use.
func (st *session) removeQuietly(sb runbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(st.ctx), cleanupTimeout)
	defer cancel()
	if err := st.srv.place.Remove(ctx, sb, true); err != nil {
		st.srv.cfg.Logger.Warn("remove sandbox", "sandbox", sb.ID, "error", err)
	}
}

// forget drops the session's connection to a sandbox (removed, or found
// lost), so that a later call without a sandbox makes a fresh default. The
// sandbox stays the session's (disown ends that).
func (st *session) forget(id string) {
	st.mu.Lock()
	ref := st.sandboxes[id]
	delete(st.sandboxes, id)
	if st.def == id {
		st.def = ""
	}
	st.mu.Unlock()
	if ref != nil {
		ref.cl.Close()
		ref.release()
	}
}

// lost forgets ref when err says its sandbox is gone (lost, or no longer
// there at all: removed through runbox serve's API, say), and returns err.
func (st *session) lost(ref *sandboxRef, err error) error {
	if errors.Is(err, runbox.ErrSandboxLost) || errors.Is(err, runbox.ErrSandboxNotFound) {
		st.forget(ref.sb.ID)
	}
	return err
}

// root returns the sandbox's workspace: the directory commands start in,
// beneath which the file tools work. It asks the sandbox once.
func (st *session) root(ctx context.Context, ref *sandboxRef) (string, error) {
	ref.rootMu.Lock()
	defer ref.rootMu.Unlock()
	if ref.root != "" {
		return ref.root, nil
	}
	res, err := ref.cl.Exec(ctx, "pwd", client.WithTimeout(st.srv.cfg.CallTimeout), client.WithSpill(runbox.SpillNever))
	if err != nil {
		return "", st.lost(ref, fmt.Errorf("find the sandbox's workspace: %w", err))
	}
	dir := strings.TrimSpace(string(res.Stdout))
	if !res.OK() || !strings.HasPrefix(dir, "/") {
		return "", fmt.Errorf("find the sandbox's workspace: pwd exited %d: %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	ref.root = dir
	return dir, nil
}

// end cleans up after the session: it cancels what its calls run, waits
// for them, cancels its background execs, forgets its shell sessions and
// removes the sandboxes it made unless kept.
func (st *session) end(ctx context.Context) {
	st.cancel()
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.calls.Wait()

	st.mu.Lock()
	bgs := make([]*bgExec, 0, len(st.bg))
	for _, b := range st.bg {
		bgs = append(bgs, b)
	}
	refs := make([]*sandboxRef, 0, len(st.sandboxes))
	for _, ref := range st.sandboxes {
		refs = append(refs, ref)
	}
	st.mu.Unlock()
	// The session's context is over, so each background exec's Wait has
	// cancelled it on the daemon; wait for those stops to be confirmed.
	for _, b := range bgs {
		select {
		case <-b.done:
		case <-ctx.Done():
		}
	}
	var wg sync.WaitGroup
	for _, ref := range refs {
		wg.Go(func() {
			defer ref.release()
			defer ref.cl.Close()
			if ref.shellUsed && (!ref.made || ref.keep) {
				err := ref.cl.DeleteSession(ctx, st.shell)
				if err != nil && !errors.Is(err, runbox.ErrSessionNotFound) {
					st.srv.cfg.Logger.Warn("forget the session's shell", "sandbox", ref.sb.ID, "error", err)
				}
			}
		})
	}
	wg.Wait()
	// Every sandbox the session made and did not keep goes, connected or
	// not (one found lost is removed with force).
	for _, o := range st.owned() {
		if o.made && !o.keep {
			wg.Go(func() {
				err := st.srv.place.Remove(ctx, o.sb, true)
				if err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
					st.srv.cfg.Logger.Warn("remove the session's sandbox", "sandbox", o.sb.ID, "error", err)
				}
			})
		}
	}
	wg.Wait()
}
