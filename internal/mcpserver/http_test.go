package mcpserver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/provider/host"
)

// httpServer is an MCP HTTP handler with two tenants, a and b, each with
// its own runbox home, served on loopback.
type httpServer struct {
	url          string
	homeA, homeB string
	workA        string
	handler      *mcpserver.HTTPHandler
	server       *httptest.Server
	tokens       map[string]string // token -> tenant
	closeOnce    sync.Once
}

func startHTTP(t *testing.T) *httpServer {
	t.Helper()
	h := &httpServer{tokens: map[string]string{"token-a": "a", "token-b": "b"}}
	h.homeA, h.workA = testHome(t)
	h.homeB, _ = testHome(t)
	places := map[string]mcpserver.Sandboxes{
		"a": &mcpserver.Providers{Providers: []runbox.Provider{&host.Provider{Home: h.homeA}}, Default: host.ProviderName},
		"b": &mcpserver.Providers{Providers: []runbox.Provider{&host.Provider{Home: h.homeB}}, Default: host.ProviderName},
	}
	resolve := func(_ context.Context, token string) (string, mcpserver.Sandboxes, error) {
		tenant, ok := h.tokens[token]
		if !ok {
			return "", nil, errors.New("unknown token")
		}
		return tenant, places[tenant], nil
	}
	// The handler's Config is shared by the tenants: their default
	// sandboxes all start in one workspace.
	h.handler = mcpserver.NewHTTPHandler(resolve, mcpserver.Config{Provider: host.ProviderName,
		Spec: runbox.SandboxSpec{Workdir: h.workA}}, mcpserver.HTTPOptions{SessionIdle: time.Minute})
	h.server = httptest.NewServer(h.handler)
	h.url = h.server.URL
	t.Cleanup(func() { h.close(t) })
	return h
}

// close ends every session and the server.
func (h *httpServer) close(t *testing.T) {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := h.handler.Close(ctx); err != nil {
			t.Errorf("close the handler: %v", err)
		}
		h.server.Close()
	})
}

// connect opens an MCP session over streamable HTTP with token.
func (h *httpServer) connect(t *testing.T, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return mcptest.Connect(ctx, h.url, token)
}

// A request without a token the resolver knows is refused.
func TestHTTPRefusesWrongToken(t *testing.T) {
	h := startHTTP(t)
	for _, token := range []string{"wrong", ""} {
		if cs, err := h.connect(t, token); err == nil {
			cs.Close()
			t.Errorf("token %q: connected", token)
		}
	}
	resp, err := http.Post(h.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d, want 401", resp.StatusCode)
	}
}

// Many concurrent sessions each get their own default sandbox and shell
// session; when they end, no sandbox is left.
func TestHTTPConcurrentSessions(t *testing.T) {
	h := startHTTP(t)
	const sessions = 20
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			cs, err := h.connect(t, "token-a")
			if err != nil {
				errs <- fmt.Errorf("session %d: connect: %w", i, err)
				return
			}
			defer cs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if _, err := mcptest.SessionCarriesOver(ctx, cs, i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	eventually(t, "every session's sandbox is removed", func() bool { return len(hostSandboxes(t, h.homeA)) == 0 })
}

// A session belongs to the tenant that opened it: another tenant's token
// cannot use it, and a tenant sees only its own sandboxes.
func TestHTTPSessionBoundToTenant(t *testing.T) {
	h := startHTTP(t)
	cs, err := h.connect(t, "token-a")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	r := ok[execResult](t, cs, "exec", map[string]any{"command": "echo a"})
	if r.Stdout != "a\n" {
		t.Fatalf("exec: %+v", r)
	}
	req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo hijacked"}}}`))
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer token-b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("tenant b used tenant a's session: HTTP %d", resp.StatusCode)
	}
	csB, err := h.connect(t, "token-b")
	if err != nil {
		t.Fatal(err)
	}
	defer csB.Close()
	type list struct {
		Sandboxes []struct {
			ID string `json:"id"`
		} `json:"sandboxes"`
	}
	if l := ok[list](t, csB, "sandbox_list", nil); len(l.Sandboxes) != 0 {
		t.Errorf("tenant b sees %v", l.Sandboxes)
	}
	if msg := failing(t, csB, "exec", map[string]any{"command": "true", "sandbox": r.Sandbox}); !strings.Contains(msg, "no such sandbox") {
		t.Errorf("tenant b naming a's sandbox: %q", msg)
	}
}

// A sandbox made with keep outlives its session; one made without does
// not.
func TestSandboxCreateKeep(t *testing.T) {
	s := startStdio(t)
	type info struct {
		ID      string `json:"id"`
		Default bool   `json:"default"`
		Made    bool   `json:"made_by_session"`
		Keep    bool   `json:"keep"`
	}
	kept := ok[info](t, s.cs, "sandbox_create", map[string]any{"name": "kept-on-purpose", "keep": true})
	temp := ok[info](t, s.cs, "sandbox_create", map[string]any{"use": true})
	if !kept.Keep || !kept.Made || kept.Default || !temp.Default || temp.Keep {
		t.Errorf("made: %+v %+v", kept, temp)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "true"}); r.Sandbox != temp.ID {
		t.Errorf("exec ran in %s, not the default %s", r.Sandbox, temp.ID)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "true", "sandbox": "kept-on-purpose"}); r.Sandbox != kept.ID {
		t.Errorf("exec by name ran in %s", r.Sandbox)
	}
	s.close(t)
	sbs := hostSandboxes(t, s.home)
	if len(sbs) != 1 || sbs[0].ID != kept.ID {
		t.Errorf("after the session: %v, want only the kept %s", sbs, kept.ID)
	}
	// A later session does not see it (it made none), unless the operator
	// binds it there with --sandbox; the bound session leaves it alone.
	s2 := startStdioHome(t, s.home, s.workdir)
	if msg := failing(t, s2.cs, "exec", map[string]any{"command": "true", "sandbox": "kept-on-purpose"}); !strings.Contains(msg, "no such sandbox") {
		t.Errorf("a later session used the kept sandbox: %q", msg)
	}
	s2.close(t)
	s3 := startStdioHome(t, s.home, s.workdir, "--sandbox", "kept-on-purpose")
	if r := ok[execResult](t, s3.cs, "exec", map[string]any{"command": "true"}); r.Sandbox != kept.ID {
		t.Errorf("the bound session ran in %s, not %s", r.Sandbox, kept.ID)
	}
	s3.close(t)
	if sbs := hostSandboxes(t, s.home); len(sbs) != 1 || sbs[0].ID != kept.ID {
		t.Errorf("after the bound session: %v, want the kept %s", sbs, kept.ID)
	}
}
