package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/runbox/runbox/internal/registry"
)

// portRoutePrefix starts the route to a sandbox's exposed port:
// /sandboxes/{id}/ports/{port}/{path...} reaches http://localhost:{port}/{path...}
// on the sandbox's own loopback: by the connected socket its runboxd passes
// where it shares this kernel, else through its ForwardService.
const portRoutePrefix = "/sandboxes/"

// portPath splits a route path into the sandbox, the port and the path
// for the sandbox's server ("" when the route's own path lacks its slash).
func portPath(p string) (sandbox string, port int, rest string, err error) {
	parts := strings.SplitN(strings.TrimPrefix(p, portRoutePrefix), "/", 4)
	if len(parts) < 3 || parts[0] == "" || parts[1] != "ports" {
		return "", 0, "", fmt.Errorf("want %s{sandbox}/ports/{port}/{path}", portRoutePrefix)
	}
	// Decimal digits only, as the route's URLs write it: a sign, a
	// leading zero or another spelling would be a second name for the
	// same port (and path) that cookies and prefixes do not know.
	port, err = strconv.Atoi(parts[2])
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != parts[2] {
		return "", 0, "", fmt.Errorf("port %q: want 1 to 65535 in decimal digits", parts[2])
	}
	if len(parts) == 4 {
		rest = "/" + parts[3]
	}
	return parts[0], port, rest, nil
}

// portRoute serves the route to exposed ports. A request is let through
// with the tenant's bearer token, or with a signed URL (or the cookie a
// signed URL set) for this sandbox and port; the port must be exposed.
// Neither the token, nor the signature, nor the cookie reaches the
// sandbox.
func (s *Server) portRoute(w http.ResponseWriter, r *http.Request) {
	key, port, rest, err := portPath(r.URL.Path)
	if err != nil {
		http.Error(w, "not found: "+err.Error(), http.StatusNotFound)
		return
	}
	if rest == "" { // the route's root: relative links need the slash
		u := *r.URL
		u.Path += "/"
		u.RawPath = ""
		http.Redirect(w, r, u.String(), http.StatusPermanentRedirect)
		return
	}
	rec, cookie, status, err := s.portAuth(r, key, port)
	if err != nil {
		if status == http.StatusUnauthorized {
			s.metrics.authFailures.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="runbox"`)
		}
		http.Error(w, http.StatusText(status)+": "+err.Error(), status)
		return
	}
	ctx := context.WithValue(r.Context(), tenantKey{}, registry.Tenant{Name: rec.Tenant})
	_, exposed, err := s.store.PortExposure(ctx, rec.ID, port)
	if err != nil {
		http.Error(w, "cannot check the port now: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !exposed {
		http.Error(w, fmt.Sprintf("forbidden: port %d of sandbox %s is not exposed (SandboxService.ExposePort exposes it)", port, rec.ID), http.StatusForbidden)
		return
	}
	rt, err := s.route(ctx, rec.ID)
	if err != nil {
		http.Error(w, fmt.Sprintf("sandbox %s: %v", rec.ID, err), http.StatusBadGateway)
		return
	}
	defer rt.release()
	// A WebSocket outlives the request's handling by the server's
	// shutdown only as long as streams do.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	prefix := portRoutePrefix + key + "/ports/" + strconv.Itoa(port)
	if cookie != "" {
		// A browser's later requests under this route (a page's scripts,
		// images, WebSockets) carry the signed URL's authority.
		exp, _, _ := strings.Cut(cookie, ".")
		secs, _ := strconv.ParseInt(exp, 10, 64)
		http.SetCookie(w, &http.Cookie{Name: portCookie, Value: cookie, Path: prefix + "/",
			Expires: time.Unix(secs, 0), HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	}
	up := rt.up
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", "localhost:"+strconv.Itoa(port)
			out.Host = out.URL.Host
			out.URL.Path = rest
			out.URL.RawPath = ""
			if raw := pr.In.URL.RawPath; raw != "" && strings.HasPrefix(raw, prefix+"/") {
				out.URL.RawPath = strings.TrimPrefix(raw, prefix)
			}
			q := out.URL.Query()
			if q.Has(expiresParam) || q.Has(signatureParam) {
				q.Del(expiresParam)
				q.Del(signatureParam)
				out.URL.RawQuery = q.Encode()
			}
			out.Header.Del("Authorization")
			dropCookie(out.Header, portCookie)
			pr.SetXForwarded()
			out.Header.Set("X-Forwarded-Prefix", prefix)
		},
		Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				return up.dialPort(ctx, port)
			},
			// One sandbox connection per request: nothing pooled outlives
			// the request (or the port's exposure).
			DisableKeepAlives: true,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Info("port route", "sandbox", rec.ID, "port", port, "err", err)
			http.Error(w, fmt.Sprintf("bad gateway: sandbox %s: %v", rec.ID, err), http.StatusBadGateway)
		},
	}
	r = r.WithContext(ctx)
	proxy.ServeHTTP(w, r)
}

// portAuth decides who a route request is for: the bearer token's tenant
// (which must have the sandbox), or the tenant a signed URL (or its
// cookie) is bound to, and the cookie to set when a signed URL let the
// request in. It returns the HTTP status of a refusal: 401
// without credentials or with a bad token, 403 for a bad or expired
// signed URL, 404 for a sandbox the tenant does not have.
func (s *Server) portAuth(r *http.Request, key string, port int) (rec registry.Sandbox, cookie string, status int, err error) {
	if r.Header.Get("Authorization") != "" {
		tenant, err := s.bearer(r)
		if err != nil {
			return registry.Sandbox{}, "", http.StatusUnauthorized, err
		}
		rec, err = s.store.GetSandbox(r.Context(), tenant.Name, key)
		if errors.Is(err, registry.ErrNotFound) {
			return registry.Sandbox{}, "", http.StatusNotFound, fmt.Errorf("sandbox %q: no such sandbox", key)
		}
		if err != nil {
			return registry.Sandbox{}, "", http.StatusServiceUnavailable, err
		}
		return rec, "", 0, nil
	}
	q := r.URL.Query()
	exp, sig := q.Get(expiresParam), q.Get(signatureParam)
	fromCookie := false
	if exp == "" && sig == "" {
		if c, err := r.Cookie(portCookie); err == nil {
			exp, sig, _ = strings.Cut(c.Value, ".")
			fromCookie = true
		}
	}
	if exp == "" && sig == "" {
		return registry.Sandbox{}, "", http.StatusUnauthorized, errors.New(
			`no credentials: send "Authorization: Bearer TOKEN", or open the signed URL that SandboxService.ExposePort returns`)
	}
	rec, err = s.store.SandboxByID(r.Context(), key)
	if errors.Is(err, registry.ErrNotFound) {
		// The same answer as a wrong signature: a URL tells nothing
		// about sandboxes it does not sign.
		return registry.Sandbox{}, "", http.StatusForbidden, errSignatureMismatch
	}
	if err != nil {
		return registry.Sandbox{}, "", http.StatusServiceUnavailable, err
	}
	// The signature is bound to the port's exposure in force: one made
	// before an UnexposePort matches nothing, whether or not the port was
	// exposed again since.
	nonce, _, err := s.store.PortExposure(r.Context(), rec.ID, port)
	if err != nil {
		return registry.Sandbox{}, "", http.StatusServiceUnavailable, err
	}
	k, err := s.portKey(r.Context())
	if err != nil {
		return registry.Sandbox{}, "", http.StatusServiceUnavailable, err
	}
	if err := checkPortSignature(k, rec.Tenant, rec.ID, port, nonce, exp, sig, time.Now()); err != nil {
		return registry.Sandbox{}, "", http.StatusForbidden, err
	}
	if !fromCookie {
		cookie = exp + "." + sig
	}
	return rec, cookie, 0, nil
}

// dropCookie removes the cookie name from h's Cookie headers, keeping the
// others.
func dropCookie(h http.Header, name string) {
	cs := (&http.Request{Header: h}).Cookies()
	h.Del("Cookie")
	var keep []string
	for _, c := range cs {
		if c.Name != name {
			keep = append(keep, c.String())
		}
	}
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}
