package mcpserver_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/provider/host"
)

// TestHTTPBoundHeaderChecked: a session's Runbox-Sandbox header must name
// one of the tenant's sandboxes before the handler keeps anything for it.
// A tenant that opens sessions with 200 random header values (one of
// 64 KiB) and with tenant b's sandbox id gets each refused, and the
// handler keeps no Server for any of them (before, one per distinct value,
// for good: memory a tenant grew at will). Bound by id and by name, a's
// own sandbox (the control) is one Server, and the session works in it.
func TestHTTPBoundHeaderChecked(t *testing.T) {
	h := startHTTP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pa := &host.Provider{Home: h.homeA}
	name := "own-" + strings.ToLower(rand.Text()[:8])
	own, err := pa.Create(ctx, runbox.SandboxSpec{Name: name, Workdir: h.workA})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Remove(context.Background(), own, true)
	pb := &host.Provider{Home: h.homeB}
	theirs, err := pb.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Remove(context.Background(), theirs, true)

	initialize := func(bound string) int {
		req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer token-a")
		req.Header.Set(mcpserver.SandboxHeader, bound)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	before := mcpserver.HTTPServers(h.handler)
	hostile := []string{theirs.ID, strings.Repeat("x", 64<<10), "../" + own.ID, own.ID + "/.."}
	for range 200 {
		hostile = append(hostile, "sb-"+strings.ToLower(rand.Text()[:12]))
	}
	for _, bound := range hostile {
		if code := initialize(bound); code < 400 {
			t.Errorf("a session bound to %.40q: HTTP %d, want it refused", bound, code)
		}
	}
	if n := mcpserver.HTTPServers(h.handler); n != before {
		t.Errorf("after %d sessions bound to no sandbox of the tenant the handler keeps %d Servers, had %d", len(hostile), n, before)
	}
	for _, key := range []string{own.ID, name} {
		cs, err := mcptest.ConnectBound(ctx, h.url, "token-a", key)
		if err != nil {
			t.Fatalf("bound to its own sandbox by %s: %v", key, err)
		}
		r := ok[execResult](t, cs, "exec", map[string]any{"command": "echo bound"})
		if r.Stdout != "bound\n" || r.Sandbox != own.ID {
			t.Errorf("exec in the session bound by %s: %+v", key, r)
		}
		cs.Close()
	}
	if n := mcpserver.HTTPServers(h.handler); n != before+1 {
		t.Errorf("bound by id and by name to one sandbox: %d Servers, want %d", n, before+1)
	}
}
