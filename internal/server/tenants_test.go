package server_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// TestTenantsSeeOnlyTheirOwn: every call of one tenant on another's sandbox
// fails exactly as for an id that never existed.
func TestTenantsSeeOnlyTheirOwn(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	a, b := ts.tenant(t, "a"), ts.tenant(t, "b")
	sb, err := a.Create(ctx, runbox.SandboxSpec{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	ca := a.Sandbox(sb.ID)
	defer ca.Close()
	p, err := ca.Start(ctx, "sleep 0.2; echo done")
	if err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{sb.ID, "mine", "sb-000000000000"} {
		cb := b.Sandbox(key, client.WithReconnectWindow(100_000_000))
		calls := map[string]error{}
		_, calls["get"] = b.Get(ctx, key)
		_, calls["exec"] = cb.Exec(ctx, "true")
		_, calls["attach"] = cb.Attach(ctx, p.ID())
		calls["cancel"] = cb.Cancel(ctx, p.ID(), 0)
		_, calls["list execs"] = cb.List(ctx)
		_, _, calls["read file"] = cb.ReadFile(ctx, "/etc/hostname")
		_, calls["write file"] = cb.WriteFile(ctx, "/tmp/x", strings.NewReader("x"))
		_, _, calls["run"] = b.Run(ctx, key, runbox.ExecSpec{Command: "true"})
		calls["delete"] = b.Remove(ctx, runbox.Sandbox{ID: key}, true)
		var want string
		for name, err := range calls {
			if !errors.Is(err, runbox.ErrSandboxNotFound) {
				t.Errorf("tenant b, %s on %s: %v; want ErrSandboxNotFound", name, key, err)
				continue
			}
			// The message is the same whether the sandbox is a's or never was.
			msg := err.Error()
			msg = msg[strings.Index(msg, ": ")+2:]
			if name == "get" {
				want = msg
			}
		}
		if want != "no such sandbox" {
			t.Errorf("get %s says %q", key, want)
		}
		// On the wire: the same code and message, the key aside.
		_, out := post(t, ts.url, ts.token(t, "b"), "/runbox.v1.SandboxService/Get", "", []byte(`{"id":"`+key+`"}`))
		if out["code"] != "not_found" || out["message"] != `sandbox "`+key+`": no such sandbox` {
			t.Errorf("tenant b's Get %s on the wire: %v", key, out)
		}
		cb.Close()
	}
	if l, err := b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("tenant b lists %v, %v", l, err)
	}
	if res, err := p.Wait(ctx); err != nil || string(res.Stdout) != "done\n" {
		t.Fatalf("a's exec: %+v, %v", res, err)
	}
	if l, err := a.List(ctx); err != nil || len(l) != 1 {
		t.Fatalf("tenant a lists %v, %v", l, err)
	}
}

// TestTokens: no call but /healthz succeeds without a valid token; a
// revoked or wrong token is Unauthenticated.
func TestTokens(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	tok, secret, err := ts.store.CreateToken(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/readyz", "/metrics", "/runbox.v1.SandboxService/List", "/runbox.v1.RunboxService/List", "/mcp", "/nope"} {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + secret, "Bearer"} {
			req, _ := http.NewRequest("POST", ts.url+path, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "unauthenticated") {
				t.Errorf("%s with %q: %d %s", path, auth, resp.StatusCode, body)
			}
		}
	}
	resp, err := http.Get(ts.url + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()

	good, _ := client.NewServer(ts.url, secret)
	defer good.Close()
	if _, err := good.List(ctx); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/readyz", "/metrics"} {
		req, _ := http.NewRequest("GET", ts.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s with a token: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	if err := ts.store.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := good.List(ctx); !errors.Is(err, runbox.ErrUnauthenticated) {
		t.Fatalf("revoked token: %v, want ErrUnauthenticated", err)
	}
	c := client.NewRemote(ts.url, secret, "sb-x")
	defer c.Close()
	if _, err := c.Exec(ctx, "true"); !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Fatalf("exec with a revoked token: %v, want ErrUnauthenticated", err)
	}
}

// TestQuotas: over a tenant's quota, ResourceExhausted naming the limit.
func TestQuotas(t *testing.T) {
	ts := startServer(t, func(c *serverConfig) { c.Quotas.MaxSandboxes, c.Quotas.MaxExecs = 1, 1 })
	ctx := ctxT(t)
	a := ts.tenant(t, "a")
	sb, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, runbox.SandboxSpec{}); !errors.Is(err, runbox.ErrQuotaExceeded) || !strings.Contains(err.Error(), "max_sandboxes") {
		t.Fatalf("second sandbox: %v; want ErrQuotaExceeded naming max_sandboxes", err)
	}
	// Another tenant has its own count.
	b := ts.tenant(t, "b")
	if _, err := b.Create(ctx, runbox.SandboxSpec{}); err != nil {
		t.Fatal(err)
	}
	c := a.Sandbox(sb.ID)
	defer c.Close()
	p, err := c.Start(ctx, "sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, "true")
	if !errors.Is(err, runbox.ErrQuotaExceeded) || !strings.Contains(err.Error(), "max_execs") {
		t.Fatalf("second exec: %v; want ErrQuotaExceeded naming max_execs", err)
	}
	if err := p.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	p.Wait(ctx)
	// The running one ended: the next is let in.
	if res, err := c.Exec(ctx, "true"); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the first ended: %+v, %v", res, err)
	}
	// Tenant quotas override the server's.
	if err := ts.store.SetQuotas(context.Background(), "a", 2, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, runbox.SandboxSpec{}); err != nil {
		t.Fatalf("with max_sandboxes 2: %v", err)
	}
}

// TestQuotaConcurrentCreates: concurrent creates up to a tenant's
// max_sandboxes all succeed, never refused for a sandbox counted twice
// (once made and once still being made), and one more is refused. Each
// round starts its creates after random delays so that one create's end
// falls between another's count and its check.
func TestQuotaConcurrentCreates(t *testing.T) {
	const max = 4
	ts := startServer(t, func(c *serverConfig) { c.Quotas.MaxSandboxes = max })
	ctx := ctxT(t)
	a := ts.tenant(t, "a")
	for round := range 8 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var made []runbox.Sandbox
		var refused []error
		for range max {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
				sb, err := a.Create(ctx, runbox.SandboxSpec{})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
					return
				}
				made = append(made, sb)
			})
		}
		wg.Wait()
		for _, err := range refused {
			t.Errorf("round %d: %d concurrent creates under max_sandboxes %d: %v", round, max, max, err)
		}
		if len(made) == max {
			if _, err := a.Create(ctx, runbox.SandboxSpec{}); !errors.Is(err, runbox.ErrQuotaExceeded) {
				t.Errorf("round %d: create past max_sandboxes %d: %v, want ErrQuotaExceeded", round, max, err)
			}
		}
		for _, sb := range made {
			if err := a.Remove(ctx, sb, true); err != nil {
				t.Fatal(err)
			}
		}
		if t.Failed() {
			return
		}
	}
}
