package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/registry"
)

type tenantKey struct{}

// TenantFromContext returns the authenticated tenant of a request the
// server's handlers (and the MCP mount) serve.
func TenantFromContext(ctx context.Context) (registry.Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(registry.Tenant)
	return t, ok
}

// tenantOf returns the tenant of an authenticated call's context (always
// set behind authenticate).
func tenantOf(ctx context.Context) registry.Tenant {
	t, _ := TenantFromContext(ctx)
	return t
}

// authenticate lets through only requests with a valid bearer token, with
// the token's tenant in their context. A refusal is written in the
// request's own protocol (Connect, gRPC, gRPC-Web), or as plain HTTP 401.
func (s *Server) authenticate(next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, err := s.bearer(r)
		if err != nil {
			s.metrics.authFailures.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="runbox"`)
			if errs.IsSupported(r) {
				ce := connect.NewError(connect.CodeUnauthenticated, err)
				ce.Meta().Set(errorKey, tagUnauthenticated)
				_ = errs.Write(w, r, ce)
				return
			}
			http.Error(w, "unauthenticated: "+err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// bearer checks the request's bearer token.
func (s *Server) bearer(r *http.Request) (registry.Tenant, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return registry.Tenant{}, fmt.Errorf("%w: no bearer token: send the header \"Authorization: Bearer TOKEN\" (runbox token create makes one)", runbox.ErrUnauthenticated)
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return registry.Tenant{}, fmt.Errorf("%w: the Authorization header is not \"Bearer TOKEN\"", runbox.ErrUnauthenticated)
	}
	t, err := s.store.Authenticate(r.Context(), strings.TrimSpace(token))
	if errors.Is(err, registry.ErrNotFound) {
		return registry.Tenant{}, fmt.Errorf("%w: the bearer token is unknown or revoked", runbox.ErrUnauthenticated)
	}
	if err != nil {
		return registry.Tenant{}, fmt.Errorf("%w: cannot check the token now: %v", runbox.ErrUnauthenticated, err)
	}
	return t, nil
}
