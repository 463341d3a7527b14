package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/registry"
)

// upstream is the server's connection to one sandbox's runboxd, through
// its provider's Dialer (which carries the sandbox's secret).
type upstream struct {
	sb        runbox.Sandbox
	transport *http.Transport
	rpc       runboxv1connect.RunboxServiceClient
	files     runboxv1connect.FilesServiceClient
	// forward reaches ports on the sandbox's loopback (the port route)
	// in ForwardService messages, where runboxd cannot pass sockets.
	forward runboxv1connect.ForwardServiceClient
	// fdForward, where the provider says runboxd shares this kernel
	// (local, host, docker with its socket here), reaches them by the
	// connected socket runboxd passes instead: no byte in a message.
	fdForward *egress.FDForwarder
}

func newUpstream(p runbox.Provider, sb runbox.Sandbox) *upstream {
	dial := p.Dialer(sb)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	t := &http.Transport{
		Protocols:       &protocols,
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		IdleConnTimeout: 90 * time.Second,
		HTTP2:           &http.HTTP2Config{SendPingTimeout: 5 * time.Second, PingTimeout: 5 * time.Second},
	}
	hc := &http.Client{Transport: t}
	var fdForward *egress.FDForwarder
	if egress.PassesFDs(p, sb) {
		fdForward = &egress.FDForwarder{Dial: dial}
	}
	return &upstream{
		fdForward: fdForward,
		sb:        sb,
		transport: t,
		rpc:       runboxv1connect.NewRunboxServiceClient(hc, "http://runboxd", connect.WithAcceptCompression("gzip", nil, nil)),
		files:     runboxv1connect.NewFilesServiceClient(hc, "http://runboxd", connect.WithAcceptCompression("gzip", nil, nil)),
		forward:   runboxv1connect.NewForwardServiceClient(hc, "http://runboxd"),
	}
}

func (u *upstream) close() {
	u.transport.CloseIdleConnections()
	if u.fdForward != nil {
		u.fdForward.Close() // connections already handed over go on
	}
}

// dialPort connects to port on the sandbox's loopback: by the socket
// runboxd passes where it can, else over a ForwardService stream.
func (u *upstream) dialPort(ctx context.Context, port int) (net.Conn, error) {
	if u.fdForward != nil {
		return u.fdForward.DialPort(ctx, port)
	}
	return dialPortStream(ctx, u.forward, port)
}

// routed is a sandbox a call was routed to. release must be called when
// the call ends: until then the sandbox counts as in use (never idle).
type routed struct {
	rec       registry.Sandbox
	up        *upstream
	recreated bool
	release   func()
}

// route finds the caller's sandbox named key (id or name) and the way to
// its runboxd. A sandbox found lost is recreated when its spec asks for it,
// else the call fails with ErrSandboxLost.
func (s *Server) route(ctx context.Context, key string) (*routed, error) {
	tenant := tenantOf(ctx)
	if key == "" {
		return nil, invalid(SandboxHeader, "no sandbox named: set the %s header (or sandbox_id) to a sandbox's id or name", SandboxHeader)
	}
	rec, err := s.store.GetSandbox(ctx, tenant.Name, key)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, notFound(key)
	}
	if err != nil {
		return nil, apiError(err)
	}
	if s.pausedByProvider(rec) {
		return nil, pausedError(rec.ID) // its runboxd is frozen with it
	}
	release, ok := s.acquire(rec.ID)
	if !ok {
		return nil, notFound(key) // being removed: gone for every purpose
	}
	r := &routed{rec: rec, release: release}
	if rec.State == registry.StateLost {
		if err := s.recreateOrFail(ctx, r); err != nil {
			release()
			return nil, err
		}
		return r, nil
	}
	up, err := s.upstreamFor(ctx, rec)
	if err != nil {
		release()
		return nil, err
	}
	if up == nil { // found lost just now
		if rec, err = s.store.GetSandbox(ctx, tenant.Name, rec.ID); err != nil {
			release()
			return nil, apiError(err)
		}
		r.rec = rec
		if err := s.recreateOrFail(ctx, r); err != nil {
			release()
			return nil, err
		}
		return r, nil
	}
	r.up = up
	return r, nil
}

// upstreamFor returns the cached connection to rec's runboxd, or looks the
// sandbox up with its provider. It returns nil (and marks the sandbox lost)
// when the provider no longer has it or its runboxd does not answer.
func (s *Server) upstreamFor(ctx context.Context, rec registry.Sandbox) (*upstream, error) {
	s.mu.Lock()
	up := s.upstreams[rec.ID]
	s.mu.Unlock()
	if up != nil {
		return up, nil
	}
	p, ok := s.cfg.Providers[rec.Provider]
	if !ok {
		return nil, apiError(fmt.Errorf("%w: sandbox %s: provider %q is not enabled on this server", runbox.ErrProviderUnavailable, rec.ID, rec.Provider))
	}
	sb, err := p.Get(ctx, rec.ProviderID)
	if err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
		return nil, apiError(fmt.Errorf("look up sandbox %s: %w", rec.ID, err))
	}
	if err != nil || !sb.Alive {
		if lost := s.checkLost(rec); lost != nil {
			return nil, nil
		}
		if sb, err = p.Get(ctx, rec.ProviderID); err != nil || !sb.Alive {
			return nil, apiError(fmt.Errorf("%w: sandbox %s does not answer now; try again", runbox.ErrProviderUnavailable, rec.ID))
		}
	}
	up = newUpstream(p, sb)
	s.mu.Lock()
	if cur := s.upstreams[rec.ID]; cur != nil {
		up.close()
		up = cur
	} else {
		s.upstreams[rec.ID] = up
	}
	s.mu.Unlock()
	return up, nil
}

// dropUpstream forgets the connection to a sandbox.
func (s *Server) dropUpstream(id string) {
	s.mu.Lock()
	up := s.upstreams[id]
	delete(s.upstreams, id)
	s.mu.Unlock()
	if up != nil {
		up.close()
	}
}

// checkLost is called when a call to rec's runboxd failed on its
// connection. It asks the provider whether the sandbox is still there; if
// not, the sandbox is marked lost and the error to answer is returned
// (ErrSandboxLost, tagged). nil means the sandbox answers (or cannot be
// judged now): the failure was the connection's, and the caller may retry.
func (s *Server) checkLost(rec registry.Sandbox) error {
	why, lost := s.probeLost(rec)
	if !lost {
		return nil
	}
	s.markLost(rec, why)
	return lostError(rec.ID, why)
}

// probeAttempts and probePause: a sandbox is lost only when its provider
// says so this many times in a row, this far apart. One missed probe (a
// busy machine can take a second to answer) must not condemn a sandbox.
const (
	probeAttempts = 3
	probePause    = 500 * time.Millisecond
)

// probeLost asks rec's provider whether the sandbox is gone: the provider
// no longer has it, or its runboxd does not answer, every time asked.
func (s *Server) probeLost(rec registry.Sandbox) (why string, lost bool) {
	p, ok := s.cfg.Providers[rec.Provider]
	if !ok {
		return "", false
	}
	for i := 0; i < probeAttempts; i++ {
		if i > 0 {
			select {
			case <-s.bg.Done():
				return "", false
			case <-time.After(probePause):
			}
		}
		ctx, cancel := context.WithTimeout(s.bg, 10*time.Second)
		sb, err := p.Get(ctx, rec.ProviderID)
		cancel()
		switch {
		case errors.Is(err, runbox.ErrSandboxNotFound):
			why = fmt.Sprintf("the %s provider no longer has sandbox %s", rec.Provider, rec.ProviderID)
		case err != nil:
			return "", false // cannot tell
		case !sb.Alive:
			why = sb.Detail["lost"]
			if why == "" {
				why = "its runboxd does not answer"
			}
		default:
			return "", false
		}
	}
	return why, true
}

// lostError is the answer for a call to a lost sandbox.
func lostError(id, why string) error {
	return apiError(fmt.Errorf("%w: sandbox %s: %s (delete it with force, or create it with recreate: true to have it replaced on next use)",
		runbox.ErrSandboxLost, id, why))
}

// markLost records that rec's runboxd is gone, once, with an audit row.
// rec may be stale: if the sandbox was recreated since (another provider
// sandbox now stands for it), its predecessor's death changes nothing,
// neither its state nor its connection.
func (s *Server) markLost(rec registry.Sandbox, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	marked, err := s.store.MarkLost(ctx, rec.ID, rec.ProviderID, why)
	if err != nil {
		s.log.Error("mark sandbox lost", "sandbox", rec.ID, "err", err)
		return
	}
	if !marked { // recreated, or marked by another call, meanwhile
		return
	}
	s.dropUpstream(rec.ID)
	s.log.Warn("sandbox lost", "sandbox", rec.ID, "tenant", rec.Tenant, "provider", rec.Provider, "reason", why)
	if err := s.store.Lifecycle(ctx, rec.Tenant, rec.ID, registry.KindLost, why); err != nil {
		s.log.Error("audit", "err", err)
	}
	s.execsLost(rec.ID, why)
}
