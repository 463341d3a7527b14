package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/registry"
)

type baseURLKey struct{}

// withBaseURL records the scheme and host a request came in on, the base
// of the port URLs ExposePort returns when Config.PublicURL is not set.
func withBaseURL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), baseURLKey{}, scheme+"://"+r.Host)))
	})
}

// baseURL is the base of port URLs for a call's context.
func (s *Server) baseURL(ctx context.Context) string {
	if s.cfg.PublicURL != "" {
		return strings.TrimRight(s.cfg.PublicURL, "/")
	}
	b, _ := ctx.Value(baseURLKey{}).(string)
	return b
}

// tenantSandbox is tenant's sandbox key (id or name), or the API's
// NotFound.
func (s *Server) tenantSandbox(ctx context.Context, key string) (registry.Sandbox, error) {
	if key == "" {
		return registry.Sandbox{}, invalid("sandbox_id", "empty: give a sandbox's id or name")
	}
	rec, err := s.store.GetSandbox(ctx, tenantOf(ctx).Name, key)
	if errors.Is(err, registry.ErrNotFound) {
		return registry.Sandbox{}, notFound(key)
	}
	if err != nil {
		return registry.Sandbox{}, apiError(err)
	}
	return rec, nil
}

func checkPort(p uint32) error {
	if p < 1 || p > 65535 {
		return invalid("port", "%d: want 1 to 65535", p)
	}
	return nil
}

func (h *sandboxService) ExposePort(ctx context.Context, req *connect.Request[runboxv1.ExposePortRequest]) (*connect.Response[runboxv1.ExposePortResponse], error) {
	resp, err := h.s.exposePort(ctx, tenantOf(ctx), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// exposePort opens a port of tenant's sandbox on the route and signs a URL
// for it. SandboxService.ExposePort and MCP sessions both expose through
// it.
func (s *Server) exposePort(ctx context.Context, tenant registry.Tenant, m *runboxv1.ExposePortRequest) (*runboxv1.ExposePortResponse, error) {
	ctx = context.WithValue(ctx, tenantKey{}, tenant)
	if err := checkPort(m.GetPort()); err != nil {
		return nil, err
	}
	ttl := time.Duration(m.GetUrlTtlMs()) * time.Millisecond
	switch {
	case ttl < 0:
		return nil, invalid("url_ttl_ms", "%d: want 0 (one hour) or more", m.GetUrlTtlMs())
	case ttl == 0:
		ttl = defaultURLTTL
	case ttl > maxURLTTL:
		return nil, invalid("url_ttl_ms", "%d: at most %d (seven days)", m.GetUrlTtlMs(), maxURLTTL.Milliseconds())
	}
	rec, err := s.tenantSandbox(ctx, m.GetSandboxId())
	if err != nil {
		return nil, err
	}
	base := s.baseURL(ctx)
	if base == "" {
		return nil, apiError(fmt.Errorf("%w: this server does not know its own address (start it with --public-url)", runbox.ErrUnsupported))
	}
	key, err := s.portKey(ctx)
	if err != nil {
		return nil, apiError(err)
	}
	port := int(m.GetPort())
	nonce, err := s.store.ExposePort(ctx, rec.ID, port)
	if err != nil {
		return nil, apiError(err)
	}
	if err := s.store.Lifecycle(ctx, rec.Tenant, rec.ID, registry.KindExpose, fmt.Sprintf("port %d", port)); err != nil {
		s.log.Error("audit", "err", err)
	}
	// The expiry is in whole seconds, rounded up.
	expires := time.Now().Add(ttl + time.Second - 1).Unix()
	u := base + portRoutePrefix + url.PathEscape(rec.ID) + "/ports/" + strconv.Itoa(port) + "/"
	q := url.Values{expiresParam: {strconv.FormatInt(expires, 10)}, signatureParam: {portSignature(key, rec.Tenant, rec.ID, port, nonce, expires)}}
	return &runboxv1.ExposePortResponse{Url: u, SignedUrl: u + "?" + q.Encode(), ExpiresAtUnixMs: expires * 1000}, nil
}

func (h *sandboxService) UnexposePort(ctx context.Context, req *connect.Request[runboxv1.UnexposePortRequest]) (*connect.Response[runboxv1.UnexposePortResponse], error) {
	if err := checkPort(req.Msg.GetPort()); err != nil {
		return nil, err
	}
	rec, err := h.s.tenantSandbox(ctx, req.Msg.GetSandboxId())
	if err != nil {
		return nil, err
	}
	was, err := h.s.store.UnexposePort(ctx, rec.ID, int(req.Msg.GetPort()))
	if err != nil {
		return nil, apiError(err)
	}
	if was {
		if err := h.s.store.Lifecycle(ctx, rec.Tenant, rec.ID, registry.KindUnexpose, fmt.Sprintf("port %d", req.Msg.GetPort())); err != nil {
			h.s.log.Error("audit", "err", err)
		}
	}
	return connect.NewResponse(&runboxv1.UnexposePortResponse{}), nil
}

// egressSetter is a provider whose sandboxes' egress policy can change at
// runtime (local).
type egressSetter interface {
	SetEgress(ctx context.Context, sb runbox.Sandbox, p runbox.EgressPolicy) error
}

func (h *sandboxService) SetEgress(ctx context.Context, req *connect.Request[runboxv1.SetEgressRequest]) (*connect.Response[runboxv1.SetEgressResponse], error) {
	rec, err := h.s.setEgress(ctx, tenantOf(ctx), req.Msg.GetSandboxId(), req.Msg.GetEgress())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.SetEgressResponse{Sandbox: h.s.sandboxProto(rec)}), nil
}

// setEgress replaces the egress policy of the tenant's sandbox key (nil:
// the empty policy) within the operator's ranges, keeps it in the
// registry and audits it. SandboxService.SetEgress and MCP sessions both
// set it through here.
func (s *Server) setEgress(ctx context.Context, tenant registry.Tenant, key string, pol *runboxv1.EgressPolicy) (registry.Sandbox, error) {
	ctx = context.WithValue(ctx, tenantKey{}, tenant)
	rec, err := s.tenantSandbox(ctx, key)
	if err != nil {
		return registry.Sandbox{}, err
	}
	var spec runboxv1.SandboxSpec
	if err := protojson.Unmarshal([]byte(rec.Spec), &spec); err != nil {
		return registry.Sandbox{}, apiError(fmt.Errorf("sandbox %s spec: %w", rec.ID, err))
	}
	if spec.Network != "private" {
		return registry.Sandbox{}, invalid("egress", "sandbox %s is on network %q: an egress policy needs a sandbox created with network private", rec.ID, spec.Network)
	}
	spec.Egress = pol
	if spec.Egress == nil {
		spec.Egress = &runboxv1.EgressPolicy{}
	}
	if err := s.checkEgress(&spec); err != nil {
		return registry.Sandbox{}, err
	}
	p, ok := s.cfg.Providers[rec.Provider]
	if !ok {
		return registry.Sandbox{}, apiError(fmt.Errorf("%w: provider %q is not enabled on this server", runbox.ErrProviderUnavailable, rec.Provider))
	}
	es, ok := p.(egressSetter)
	if !ok {
		return registry.Sandbox{}, apiError(fmt.Errorf("%w: the %s provider cannot change a sandbox's egress policy at runtime", runbox.ErrUnsupported, rec.Provider))
	}
	sb, err := p.Get(ctx, rec.ProviderID)
	if err != nil {
		return registry.Sandbox{}, apiError(fmt.Errorf("look up sandbox %s: %w", rec.ID, err))
	}
	if err := es.SetEgress(ctx, sb, egressPolicy(spec.Egress)); err != nil {
		return registry.Sandbox{}, apiError(fmt.Errorf("set egress of sandbox %s: %w", rec.ID, err))
	}
	// The registry keeps the policy in force, so Get shows it and a
	// recreate starts with it.
	specJSON, _ := protojson.Marshal(&spec)
	if err := s.store.SetSpec(ctx, rec.ID, string(specJSON)); err != nil {
		return registry.Sandbox{}, apiError(err)
	}
	rec.Spec = string(specJSON)
	detail, _ := protojson.Marshal(spec.Egress)
	if err := s.store.Lifecycle(ctx, rec.Tenant, rec.ID, registry.KindEgress, string(detail)); err != nil {
		s.log.Error("audit", "err", err)
	}
	return rec, nil
}
