package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/websocket"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// sandboxAPI is a SandboxService client with tok's tenant.
func sandboxAPI(ts *testServer, tok string) runboxv1connect.SandboxServiceClient {
	return runboxv1connect.NewSandboxServiceClient(http.DefaultClient, ts.url, connect.WithInterceptors(bearerInterceptor(tok)))
}

func bearerInterceptor(tok string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+tok)
			return next(ctx, req)
		}
	}
}

// get fetches u with the headers given (pairs; "Host" sets the request's
// host), and returns the status, body and headers.
func get(t *testing.T, u string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" { // the client sends req.Host, not a Host header
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// withPath is the signed URL su with path p under its route.
func withPath(t *testing.T, su, p string) string {
	u, err := url.Parse(su)
	if err != nil {
		t.Fatal(err)
	}
	u.Path += p
	return u.String()
}

// TestPortRoute: a dev server (python3 -m http.server) and a WebSocket
// echo server in a private-network local sandbox are reached through
// serve's route with the tenant's token and with the signed URL
// ExposePort hands out (and the cookie it sets for a browser's later
// requests); neither the token nor the signature reaches the sandbox. The
// route refuses: no credentials (401), an unknown token (401), another
// tenant's token (404), a signature moved to another port or altered
// (403), an expired URL (403), a port not exposed or unexposed since
// (403).
// TestPortRoute drives the route both ways serve reaches a sandbox's
// port: by the connected socket runboxd passes (a provider on this
// kernel that says so) and in ForwardService messages (one that does
// not: docker's exec stream, ssh, kubernetes).
func TestPortRoute(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local provider's private network needs root here (a network namespace of its own)")
	}
	for _, passFDs := range []bool{true, false} {
		t.Run(map[bool]string{true: "fd", false: "rpc"}[passFDs], func(t *testing.T) {
			probe := &fdPassingProbe{pass: passFDs}
			testPortRoute(t, startServer(t, onLocalProvider(t), probe.wrap))
			if probe.asked.Load() == 0 {
				t.Errorf("serve never asked the provider whether runboxd passes sockets")
			}
		})
	}
}

// fdPassingProbe wraps the server's providers so that each says
// whether runboxd passes sockets as pass says, and counts the asking.
type fdPassingProbe struct {
	pass  bool
	asked atomic.Int32
}

func (p *fdPassingProbe) wrap(c *serverConfig) {
	for name, prov := range c.Providers {
		c.Providers[name] = fdPassingProvider{Provider: prov, probe: p}
	}
}

type fdPassingProvider struct {
	runbox.Provider
	probe *fdPassingProbe
}

func (p fdPassingProvider) PassesFDs(runbox.Sandbox) bool {
	p.probe.asked.Add(1)
	return p.probe.pass
}

// RunsInHostDirectory passes on the wrapped provider's answer, so serve
// still gives the sandbox a fresh workspace of its own (not the test's
// working directory).
func (p fdPassingProvider) RunsInHostDirectory() bool {
	hd, ok := p.Provider.(interface{ RunsInHostDirectory() bool })
	return ok && hd.RunsInHostDirectory()
}

func testPortRoute(t *testing.T, ts *testServer) {
	ctx := ctxT(t)
	tok, other := ts.token(t, "a"), ts.token(t, "b")
	srv := ts.tenant(t, "a")
	api := sandboxAPI(ts, tok)
	sb, err := srv.Create(ctx, runbox.SandboxSpec{Network: "private"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(context.Background(), sb, true)

	script, err := os.ReadFile("testdata/ports/wsecho.py")
	if err != nil {
		t.Fatal(err)
	}
	marker := rand.Text()
	const httpPort, wsPort, closedPort = 8123, 8124, 8125
	res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fmt.Sprintf(
		`mkdir -p site && echo %s > site/hello.txt && cat > wsecho.py && `+
			`(cd site && nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &) && `+
			`(nohup python3 wsecho.py %d >/dev/null 2>&1 &) && (nohup python3 wsecho.py %d >/dev/null 2>&1 &)`,
		marker, httpPort, wsPort, closedPort), Stdin: script})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the servers: %+v %v", res, err)
	}

	exp, err := srv.ExposePort(ctx, sb.ID, httpPort, 0)
	if err != nil {
		t.Fatal(err)
	}
	route, signed := exp.URL, exp.SignedURL
	if want := ts.url + "/sandboxes/" + sb.ID + "/ports/8123/"; route != want || !strings.HasPrefix(signed, want+"?") {
		t.Fatalf("ExposePort: url %q signed %q, want %s", route, signed, want)
	}
	// The server may take a moment to listen: ask until it answers.
	var code int
	var body string
	for i := 0; i < 100; i++ {
		if code, body, _ = get(t, route+"hello.txt", "Authorization", "Bearer "+tok); code == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 200 || strings.TrimSpace(body) != marker {
		t.Fatalf("with the token: %d %q, want 200 %s", code, body, marker)
	}
	code, body, hdr := get(t, withPath(t, signed, "hello.txt"))
	if code != 200 || strings.TrimSpace(body) != marker {
		t.Fatalf("with the signed URL: %d %q", code, body)
	}
	cookie := hdr.Get("Set-Cookie")
	if !strings.Contains(cookie, "Path=/sandboxes/"+sb.ID+"/ports/8123/") || !strings.Contains(cookie, "HttpOnly") {
		t.Errorf("the signed URL's cookie: %q", cookie)
	}
	name, val, _ := strings.Cut(strings.Split(cookie, ";")[0], "=")
	if code, body, _ = get(t, route+"hello.txt", "Cookie", name+"="+val); code != 200 || strings.TrimSpace(body) != marker {
		t.Errorf("with the signed URL's cookie: %d %q", code, body)
	}
	if code, body, _ = get(t, route); code != 401 || !strings.Contains(body, "Authorization: Bearer") {
		t.Errorf("without credentials: %d %q, want 401 saying what to send", code, body)
	}
	if code, body, _ = get(t, route, "Authorization", "Bearer not-a-token"); code != 401 || !strings.Contains(body, "unknown or revoked") {
		t.Errorf("with an unknown token: %d %q, want 401", code, body)
	}
	if code, body, _ = get(t, route, "Authorization", "Bearer "+other); code != 404 {
		t.Errorf("with another tenant's token: %d %q, want 404", code, body)
	}

	// The sandbox's server sees neither the token, nor the signature,
	// nor the cookie.
	wsExp, err := api.ExposePort(ctx, connect.NewRequest(&runboxv1.ExposePortRequest{SandboxId: sb.ID, Port: wsPort}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if code, body, _ = get(t, wsExp.Msg.GetUrl()+"headers?x=1", "Authorization", "Bearer "+tok, "Cookie", "keep=me; "+name+"="+val); code == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 200 || !strings.HasPrefix(body, "GET /headers?x=1\n") || strings.Contains(body, tok) || strings.Contains(body, val) ||
		!strings.Contains(body, "keep=me") || !strings.Contains(body, "X-Forwarded-Prefix: /sandboxes/"+sb.ID+"/ports/8124") {
		t.Errorf("what the sandbox's server received with the token: %d\n%s", code, body)
	}
	sig := wsExp.Msg.GetSignedUrl()
	if code, body, _ = get(t, withPath(t, sig, "headers")); code != 200 || strings.Contains(body, "runbox_") || !strings.HasPrefix(body, "GET /headers\n") {
		t.Errorf("what the sandbox's server received with the signed URL: %d\n%s", code, body)
	}

	// WebSocket echo, with the token and with the signed URL.
	wsURL := "ws" + strings.TrimPrefix(wsExp.Msg.GetUrl(), "http") + "echo"
	for _, c := range []struct {
		name, url string
		hdr       http.Header
	}{
		{"token", wsURL, http.Header{"Authorization": {"Bearer " + tok}}},
		{"signed URL", "ws" + strings.TrimPrefix(withPath(t, sig, "echo"), "http"), nil},
	} {
		cfg, err := websocket.NewConfig(c.url, ts.url)
		if err != nil {
			t.Fatal(err)
		}
		if c.hdr != nil {
			cfg.Header = c.hdr
		}
		ws, err := websocket.DialConfig(cfg)
		if err != nil {
			t.Fatalf("WebSocket with the %s: %v", c.name, err)
		}
		for i, msg := range []string{"hello", strings.Repeat(hex.EncodeToString([]byte(marker)), 3000)} {
			if err := websocket.Message.Send(ws, msg); err != nil {
				t.Fatalf("WebSocket with the %s: send %d: %v", c.name, i, err)
			}
			var got string
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Fatalf("WebSocket with the %s: echo %d: %d bytes, %v; want %d bytes", c.name, i, len(got), err, len(msg))
			}
		}
		ws.Close()
	}
	if _, err := websocket.Dial(wsURL, "", ts.url); err == nil || !strings.Contains(err.Error(), "bad status") {
		t.Errorf("WebSocket without credentials: %v, want a refused handshake", err)
	}

	// A signature is bound to its port: moved to another port (exposed
	// too), or altered, it is refused.
	if _, err := api.ExposePort(ctx, connect.NewRequest(&runboxv1.ExposePortRequest{SandboxId: sb.ID, Port: closedPort})); err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(signed, "/ports/8123/", fmt.Sprintf("/ports/%d/", closedPort), 1)
	if code, body, _ = get(t, moved); code != 403 || !strings.Contains(body, "signature does not match") {
		t.Errorf("a signature moved to another port: %d %q, want 403", code, body)
	}
	u, _ := url.Parse(signed)
	q := u.Query()
	q.Set("runbox_expires", fmt.Sprint(time.Now().Add(time.Hour*24*365).Unix()))
	u.RawQuery = q.Encode()
	if code, body, _ = get(t, u.String()); code != 403 || !strings.Contains(body, "signature does not match") {
		t.Errorf("a signed URL with its expiry pushed back: %d %q, want 403", code, body)
	}

	// An expired signed URL is refused, naming the expiry.
	short, err := srv.ExposePort(ctx, sb.ID, httpPort, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for !time.Now().After(short.ExpiresAt) {
		time.Sleep(100 * time.Millisecond)
	}
	if code, body, _ = get(t, short.SignedURL); code != 403 || !strings.Contains(body, "expired at") {
		t.Errorf("an expired signed URL: %d %q, want 403 naming the expiry", code, body)
	}

	// A port never exposed is not reachable, even with the token; an
	// unexposed one no longer is, by token or by signed URL.
	if code, body, _ = get(t, fmt.Sprintf("%s/sandboxes/%s/ports/%d/", ts.url, sb.ID, 8126), "Authorization", "Bearer "+tok); code != 403 || !strings.Contains(body, "not exposed") {
		t.Errorf("a port not exposed: %d %q, want 403", code, body)
	}
	if err := srv.UnexposePort(ctx, sb.ID, httpPort); err != nil {
		t.Fatal(err)
	}
	if code, body, _ = get(t, route, "Authorization", "Bearer "+tok); code != 403 || !strings.Contains(body, "not exposed") {
		t.Errorf("an unexposed port with the token: %d %q, want 403", code, body)
	}
	if code, body, _ = get(t, signed); code != 403 || !strings.Contains(body, "not exposed") {
		t.Errorf("an unexposed port's signed URL: %d %q, want 403", code, body)
	}
	got, err := srv.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ports, want := got.Detail["exposed_ports"], fmt.Sprintf("%d,%d", wsPort, closedPort); ports != want {
		t.Errorf("exposed_ports %q, want %q", ports, want)
	}
	// Another tenant cannot expose it.
	if _, err := sandboxAPI(ts, other).ExposePort(ctx, connect.NewRequest(&runboxv1.ExposePortRequest{SandboxId: sb.ID, Port: httpPort})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("another tenant's ExposePort: %v, want not_found", err)
	}
}
