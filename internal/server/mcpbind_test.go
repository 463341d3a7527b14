package server_test

import (
	"context"
	crand "crypto/rand"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/internal/server"
)

// TestMCPNewToolsSeeOnlyTheirOwn: the newer tools (port_expose,
// sandbox_pause, sandbox_resume, sandbox_snapshot, sandbox_fork,
// network_set) reach only the session's own sandboxes. A second session
// of the same tenant, naming the first session's sandbox or an API-made
// one by id, name or id prefix, get "no such sandbox" from each; tenant
// b cannot bind a session (Runbox-Sandbox) to a's sandbox at all; and
// nothing happened: no port exposed, no snapshot taken, nothing
// paused, no policy set. The first session's own calls (the control)
// work.
func TestMCPNewToolsSeeOnlyTheirOwn(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{Server: mcpserver.Config{Limits: mcpserver.Limits{Networks: []string{"private"}, Allow: []string{"*"}}}}))
	ctx := ctxT(t)
	tokA, tokB := ts.token(t, "a"), ts.token(t, "b")
	api, err := client.NewServer(ts.url, tokA)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	apiName := "api-" + strings.ToLower(crand.Text()[:8])
	other, err := api.CreateSandbox(ctx, runbox.SandboxSpec{Name: apiName}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Remove(context.Background(), other, true)
	cs1 := ts.mustMCP(t, tokA)
	sessName := "s1-" + strings.ToLower(crand.Text()[:8])
	mine := toolOK(t, cs1, "sandbox_create", map[string]any{"name": sessName})["id"].(string)
	port := 20000 + rand.IntN(20000)
	snap := "snap-" + strings.ToLower(crand.Text()[:8])

	cs2 := ts.mustMCP(t, tokA)
	// Tenant b binding a session to a's sandbox is refused as binding it
	// to one that never existed.
	for _, key := range []string{other.ID, apiName, mine, "sb-" + strings.ToLower(crand.Text()[:12])} {
		if bound, err := mcptest.ConnectBound(ctx, ts.url+"/mcp", tokB, key); err == nil {
			bound.Close()
			t.Errorf("tenant b bound a session to %s", key)
		}
	}
	calls := func(key string) []struct {
		tool string
		args map[string]any
	} {
		return []struct {
			tool string
			args map[string]any
		}{
			{"port_expose", map[string]any{"sandbox": key, "port": port}},
			{"sandbox_snapshot", map[string]any{"sandbox": key, "name": snap}},
			{"network_set", map[string]any{"sandbox": key, "allow": []string{"example.com"}}},
			{"sandbox_pause", map[string]any{"sandbox": key}},
			{"sandbox_resume", map[string]any{"sandbox": key}},
			{"sandbox_fork", map[string]any{"sandbox": key}},
		}
	}
	for _, key := range []string{other.ID, apiName, other.ID[:6], mine, sessName, mine[:6]} {
		for _, c := range calls(key) {
			if msg := toolFails(t, cs2, c.tool, c.args); !strings.Contains(msg, "no such sandbox") {
				t.Errorf("a second session, %s on %s: %q, want no such sandbox", c.tool, key, msg)
			}
		}
	}
	for _, id := range []string{other.ID, mine} {
		got, err := api.Get(ctx, id)
		if err != nil {
			t.Fatalf("sandbox %s after the attempts: %v", id, err)
		}
		if got.Detail["paused"] != "" || got.Detail["exposed_ports"] != "" || got.Detail["egress_allow"] != "" {
			t.Errorf("sandbox %s after the attempts: %v", id, got.Detail)
		}
	}
	for _, tok := range []string{tokA, tokB} {
		srv, err := client.NewServer(ts.url, tok)
		if err != nil {
			t.Fatal(err)
		}
		if ss, err := srv.Snapshots(ctx); err != nil || len(ss) != 0 {
			t.Errorf("snapshots after the attempts: %v %v", ss, err)
		}
		srv.Close()
	}
	// The control: the first session exposes its own sandbox's port.
	out := toolOK(t, cs1, "port_expose", map[string]any{"sandbox": mine[:8], "port": port})
	if u, _ := out["url"].(string); !strings.Contains(u, "/sandboxes/"+mine+"/ports/") {
		t.Errorf("port_expose on the session's own sandbox: %v", out)
	}
}
