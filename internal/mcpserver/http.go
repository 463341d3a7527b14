package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
				if s := h.existing(r); s != nil {
					s.endSessionByID(r.Header.Get("Mcp-Session-Id"))
				}
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
// session; nil (the SDK answers 400) once the handler is closed.
func (h *HTTPHandler) serverFor(r *http.Request) *mcp.Server {
	ti := auth.TokenInfoFromContext(r.Context())
	if ti == nil {
		return nil
	}
	place, _ := ti.Extra[placeKey].(Sandboxes)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || place == nil {
		return nil
	}
	key := serverKey(ti.UserID, r)
	s, ok := h.servers[key]
	if !ok {
		cfg := h.cfg
		if bound := r.Header.Get(SandboxHeader); bound != "" {
			cfg.Sandbox = bound
		}
		s = New(place, cfg)
		h.servers[key] = s
	}
	return s.mcp
}

// SandboxHeader, on a request to the HTTP endpoint, binds the session to
// that existing sandbox of the tenant (as runbox mcp --sandbox does):
// without it a session sees only the sandboxes it made.
const SandboxHeader = "Runbox-Sandbox"

// serverKey keys a tenant's Server by the sandbox its sessions are bound
// to, if any.
func serverKey(tenant string, r *http.Request) string {
	return tenant + "\x00" + r.Header.Get(SandboxHeader)
}

// existing returns the request's tenant's Server, if it has one.
func (h *HTTPHandler) existing(r *http.Request) *Server {
	ti := auth.TokenInfoFromContext(r.Context())
	if ti == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.servers[serverKey(ti.UserID, r)]
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
