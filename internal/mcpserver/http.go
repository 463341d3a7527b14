package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultSessionIdle is how long an HTTP MCP session may go without a
// request before it is ended (and cleaned up like any ended session).
const DefaultSessionIdle = 30 * time.Minute

// TokenResolver maps a bearer token to the tenant it speaks for and the
// place holding that tenant's sandboxes. For a token it does not know it
// returns an error; the request is then refused with 401.
type TokenResolver func(ctx context.Context, token string) (tenant string, place Sandboxes, err error)

// HTTPHandler serves MCP over streamable HTTP (an MCP client's "url"
// server), behind bearer tokens: each request must carry
// "Authorization: Bearer TOKEN" for a token the resolver knows, each tenant
// gets a Server of its own over its own Sandboxes, and a session can only
// be used with a token of the tenant that opened it. Mount it where MCP is
// served (runbox serve: /mcp).
type HTTPHandler struct {
	resolve TokenResolver
	cfg     Config
	handler http.Handler

	mu      sync.Mutex
	servers map[string]*Server // by tenant
	closed  bool
}

// HTTPOptions tune an HTTPHandler. The zero value is usable.
type HTTPOptions struct {
	// SessionIdle ends a session after that long without a request (zero:
	// DefaultSessionIdle).
	SessionIdle time.Duration
	// AnyHost turns off the SDK's DNS-rebinding protection, which refuses
	// (403) a request that arrived on a loopback address but names another
	// host in its Host header. Turn it off only behind a reverse proxy on
	// the same machine that forwards the public host name; the bearer
	// token is required either way.
	AnyHost bool
}

// NewHTTPHandler returns a handler whose tenants' Servers work as cfg says.
func NewHTTPHandler(resolve TokenResolver, cfg Config, o HTTPOptions) *HTTPHandler {
	if o.SessionIdle <= 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	h := &HTTPHandler{resolve: resolve, cfg: cfg.withDefaults(), servers: make(map[string]*Server)}
	streamable := mcp.NewStreamableHTTPHandler(h.serverFor, &mcp.StreamableHTTPOptions{
		SessionTimeout:             o.SessionIdle,
		DisableLocalhostProtection: o.AnyHost,
		Logger:                     h.cfg.Logger,
	})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		tenant, place, err := resolve(ctx, token)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		if tenant == "" || place == nil {
			return nil, fmt.Errorf("%w: the token resolves to no tenant", auth.ErrInvalidToken)
		}
		// UserID ties each session to its tenant: the SDK refuses a
		// session's requests made with another tenant's token.
		return &auth.TokenInfo{UserID: tenant, Extra: map[string]any{placeKey: place}}, nil
	}
	h.handler = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete {
				// The client ends its session: stop what its calls run now
				// rather than when they time out (the SDK closes a session
				// only once its calls in progress return).
				h.endSession(r)
			}
			streamable.ServeHTTP(w, r)
		}))
	return h
}

// placeKey keys a tenant's Sandboxes in its TokenInfo.
const placeKey = "runbox.sandboxes"

// ServeHTTP implements http.Handler.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

// serverFor returns the Server of the request's tenant, made on its first
// session; nil (the SDK answers 400) once the handler is closed, or when
// the request binds the session (SandboxHeader) to something that is not
// one of the tenant's sandboxes: the handler keeps one Server per tenant
// and bound sandbox, keyed by the sandbox's id, so what a tenant can make
// it keep is bounded by the sandboxes it has, never by the header values
// it sends, and another tenant's sandbox is refused exactly like one that
// does not exist.
func (h *HTTPHandler) serverFor(r *http.Request) *mcp.Server {
	ti := auth.TokenInfoFromContext(r.Context())
	if ti == nil {
		return nil
	}
	place, _ := ti.Extra[placeKey].(Sandboxes)
	if place == nil {
		return nil
	}
	bound := r.Header.Get(SandboxHeader)
	if bound != "" {
		if len(bound) > maxSandboxKey {
			return nil
		}
		ctx, cancel := context.WithTimeout(r.Context(), boundLookupTimeout)
		sb, err := place.Get(ctx, bound)
		cancel()
		if err != nil {
			h.cfg.Logger.Info("mcp: session bound to no sandbox of the tenant", "tenant", ti.UserID, "error", err)
			return nil
		}
		bound = sb.ID
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	key := ti.UserID + "\x00" + bound
	s, ok := h.servers[key]
	if !ok {
		cfg := h.cfg
		cfg.Sandbox = bound
		s = New(place, cfg)
		h.servers[key] = s
	}
	return s.mcp
}

// maxSandboxKey bounds a SandboxHeader's value: far more than any id or
// name (at most 63 bytes).
const maxSandboxKey = 256

// boundLookupTimeout bounds the look-up of a session's bound sandbox.
const boundLookupTimeout = 30 * time.Second

// SandboxHeader, on a request to the HTTP endpoint, binds the session to
// that existing sandbox of the tenant (as runbox mcp --sandbox does):
// without it a session sees only the sandboxes it made.
const SandboxHeader = "Runbox-Sandbox"

// endSession ends the request's session (Mcp-Session-Id) among the
// Servers of the request's tenant, whatever sandbox they are bound to.
func (h *HTTPHandler) endSession(r *http.Request) {
	ti := auth.TokenInfoFromContext(r.Context())
	id := r.Header.Get("Mcp-Session-Id")
	if ti == nil || id == "" {
		return
	}
	h.mu.Lock()
	var mine []*Server
	for key, s := range h.servers {
		if strings.HasPrefix(key, ti.UserID+"\x00") {
			mine = append(mine, s)
		}
	}
	h.mu.Unlock()
	for _, s := range mine {
		if s.endSessionByID(id) {
			return
		}
	}
}

// Close ends every session of every tenant, as Server.Close does, and
// refuses new ones.
func (h *HTTPHandler) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	servers := make([]*Server, 0, len(h.servers))
	for _, s := range h.servers {
		servers = append(servers, s)
	}
	h.mu.Unlock()
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Close(ctx))
	}
	return errors.Join(errs...)
}
