package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/mcpserver/mcptest"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/server"
	"github.com/runbox/runbox/provider/host"
)

// withMCP serves MCP at /mcp.
func withMCP(c server.MCPConfig) serverOpt {
	return func(cfg *serverConfig) { cfg.MCP = &c }
}

// mcpSession opens an MCP session to the server's /mcp with token.
func (ts *testServer) mcpSession(t *testing.T, token string) (*mcp.ClientSession, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return mcptest.Connect(ctx, ts.url+"/mcp", token)
}

// mustMCP is mcpSession that fails the test on error; the session is
// closed at the end of the test.
func (ts *testServer) mustMCP(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := ts.mcpSession(t, token)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// tool calls an MCP tool; a protocol error fails the test.
func tool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// toolOK calls a tool that must succeed and returns its structured result.
func toolOK(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res := tool(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", name, args, mcptest.ResultText(res))
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured result %s: %v", name, b, err)
	}
	return out
}

// toolFails calls a tool that must fail as a tool error and returns its
// message.
func toolFails(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res := tool(t, cs, name, args)
	if !res.IsError {
		t.Fatalf("%s %v: succeeded, want a tool error: %s", name, args, mcptest.ResultText(res))
	}
	return mcptest.ResultText(res)
}

// sandboxCount counts the sandboxes left, in the registry (every tenant)
// and on the machine (the host provider's records).
func (ts *testServer) sandboxCount(t *testing.T) (registered, onHost int) {
	t.Helper()
	recs, err := ts.store.ListSandboxes(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	sbs, err := (&host.Provider{Home: ts.home}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(recs), len(sbs)
}

// A wrong token, or none, opens no MCP session.
func TestMCPRefusesWrongToken(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	ts.token(t, "a")
	for _, token := range []string{"wrong", ""} {
		if cs, err := ts.mcpSession(t, token); err == nil {
			cs.Close()
			t.Errorf("token %q: connected", token)
		}
	}
	resp, err := http.Post(ts.url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d, want 401", resp.StatusCode)
	}
}

// Twenty concurrent MCP sessions of one tenant each get their own default
// sandbox and shell session, every exec is audited, and once the sessions
// end no sandbox is left, in the registry or on the machine.
func TestMCPConcurrentSessions(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	token := ts.token(t, "a")
	const sessions = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]bool{}
	errs := make(chan error, sessions)
	for i := range sessions {
		wg.Go(func() {
			cs, err := ts.mcpSession(t, token)
			if err != nil {
				errs <- fmt.Errorf("session %d: connect: %w", i, err)
				return
			}
			defer cs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sb, err := mcptest.SessionCarriesOver(ctx, cs, i)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			seen[sb] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != sessions {
		t.Errorf("%d sandboxes used by %d sessions", len(seen), sessions)
	}
	waitFor(t, "every session's sandbox to be removed", func() bool {
		reg, onHost := ts.sandboxCount(t)
		return reg == 0 && onHost == 0
	})
	rows, err := ts.store.Audit(context.Background(), registry.AuditFilter{Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range rows {
		count[r.Kind]++
		if r.Kind == registry.KindExec && strings.HasPrefix(r.Command, "echo mcp-") && (r.ExitCode == nil || *r.ExitCode != 0) {
			t.Errorf("audit row %+v", r)
		}
	}
	if count[registry.KindCreate] != sessions || count[registry.KindDelete] != sessions || count[registry.KindExec] != 2*sessions {
		t.Errorf("audit kinds %v, want %d creates and deletes, %d execs", count, sessions, 2*sessions)
	}
}

// An MCP session's sandboxes are made and its execs run as API calls are:
// audited (create, every exec with its result, delete), labelled, and held
// to the tenant's quotas.
func TestMCPAuditAndQuotas(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}), func(c *serverConfig) {
		c.Quotas = server.Quotas{MaxSandboxes: 1, MaxExecs: 1}
	})
	cs := ts.mustMCP(t, ts.token(t, "a"))
	r := toolOK(t, cs, "exec", map[string]any{"command": "echo audited; exit 4"})
	sb := r["sandbox"].(string)
	if r["exit_code"].(float64) != 4 || r["stdout"] != "audited\n" {
		t.Fatalf("exec: %v", r)
	}
	rec, err := ts.store.GetSandbox(context.Background(), "a", sb)
	if err != nil || rec.Labels[server.MCPLabel] != "mcp" {
		t.Fatalf("registry: %+v %v", rec, err)
	}
	// A second sandbox is over the tenant's quota.
	if msg := toolFails(t, cs, "sandbox_create", nil); !strings.Contains(msg, "max_sandboxes") {
		t.Errorf("sandbox_create over quota: %q", msg)
	}
	// So is a second running exec.
	bg := toolOK(t, cs, "exec", map[string]any{"command": "sleep 600", "background": true})
	if msg := toolFails(t, cs, "exec", map[string]any{"command": "true"}); !strings.Contains(msg, "max_execs") {
		t.Errorf("exec over quota: %q", msg)
	}
	toolOK(t, cs, "exec_cancel", map[string]any{"id": bg["id"]})
	cs.Close()
	waitFor(t, "the session's sandbox to be removed", func() bool {
		reg, onHost := ts.sandboxCount(t)
		return reg == 0 && onHost == 0
	})
	// The registry forgets the sandbox just before its delete row is
	// written: wait for the row too.
	var rows []registry.AuditRow
	waitFor(t, "the session's sandbox's delete row", func() bool {
		var err error
		if rows, err = ts.store.Audit(context.Background(), registry.AuditFilter{Sandbox: sb}); err != nil {
			t.Fatal(err)
		}
		return len(rows) > 0 && rows[len(rows)-1].Kind == registry.KindDelete
	})
	var kinds []string
	for _, row := range rows {
		kinds = append(kinds, row.Kind+":"+row.Outcome)
		if row.Command == "echo audited; exit 4" && (row.ExitCode == nil || *row.ExitCode != 4 || row.StdoutBytes != 8) {
			t.Errorf("exec row %+v", row)
		}
	}
	want := "create:done exec:exited exec:cancelled delete:done"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("audit %q, want %q", got, want)
	}
	if last := rows[len(rows)-1]; !strings.Contains(last.Detail, "MCP session") {
		t.Errorf("delete row %+v", last)
	}
}

// Tenant b's MCP session cannot see, exec in, read from or remove tenant
// a's sandboxes, by id or by name, nor use a's MCP session.
func TestMCPTenantIsolation(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	csA := ts.mustMCP(t, ts.token(t, "a"))
	def := toolOK(t, csA, "exec", map[string]any{"command": "echo secret > s.txt"})["sandbox"].(string)
	named := toolOK(t, csA, "sandbox_create", map[string]any{"name": "a-named", "keep": true})["id"].(string)

	tokB := ts.token(t, "b")
	csB := ts.mustMCP(t, tokB)
	if l := toolOK(t, csB, "sandbox_list", nil); len(l["sandboxes"].([]any)) != 0 {
		t.Errorf("tenant b lists %v", l)
	}
	for _, key := range []string{def, named, "a-named"} {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"exec", map[string]any{"command": "cat s.txt", "sandbox": key}},
			{"file_read", map[string]any{"path": "s.txt", "sandbox": key}},
			{"file_write", map[string]any{"path": "t.txt", "content": "x", "sandbox": key}},
			{"exec_list", map[string]any{"sandbox": key}},
			{"sandbox_remove", map[string]any{"sandbox": key, "force": true}},
			{"sandbox_pause", map[string]any{"sandbox": key}},
			{"sandbox_snapshot", map[string]any{"sandbox": key}},
			{"sandbox_fork", map[string]any{"sandbox": key}},
		} {
			if msg := toolFails(t, csB, c.tool, c.args); !strings.Contains(msg, "no such sandbox") {
				t.Errorf("tenant b, %s on %s: %q", c.tool, key, msg)
			}
		}
	}
	// b's token on a's session is refused by the SDK.
	req, _ := http.NewRequest(http.MethodPost, ts.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"exec","arguments":{"command":"cat s.txt"}}}`))
	req.Header.Set("Mcp-Session-Id", csA.ID())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tokB)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("tenant b used tenant a's session: HTTP %d", resp.StatusCode)
	}
	// a's sandboxes are untouched.
	if r := toolOK(t, csA, "exec", map[string]any{"command": "cat s.txt"}); r["stdout"] != "secret\n" || r["sandbox"] != def {
		t.Errorf("tenant a after b's attempts: %v", r)
	}
	rows, err := ts.store.Audit(context.Background(), registry.AuditFilter{Tenant: "b"})
	if err != nil || len(rows) != 0 {
		t.Errorf("tenant b's audit rows: %+v %v", rows, err)
	}
	toolOK(t, csA, "sandbox_remove", map[string]any{"sandbox": "a-named"})
}

// The reaper does not remove an idle-TTL sandbox that a live MCP session
// uses, however long the session stays quiet; once the session ends, the
// TTL counts from its last call.
func TestMCPReaperSparesSessionSandbox(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	ctx := ctxT(t)
	token := ts.token(t, "a")
	api, err := client.NewServer(ts.url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	const ttl = 500 * time.Millisecond
	used, err := api.CreateSandbox(ctx, runbox.SandboxSpec{Name: "used"}, client.SandboxOptions{IdleTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Until the session holds it, a running exec keeps it from the reaper.
	c := api.Sandbox(used.ID)
	defer c.Close()
	p, err := c.Start(ctx, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	// The client binds its session to the API-made sandbox; without the
	// binding the model would not see it (TestMCPSessionSeesOnlyItsOwn).
	cs, err := mcptest.ConnectBound(ctx, ts.url+"/mcp", token, "used")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	toolOK(t, cs, "exec", map[string]any{"command": "export KEPT=yes", "sandbox": "used"})
	if err := c.Cancel(ctx, p.ID(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// A sandbox with the same TTL, idle from now on: once the reaper has
	// removed it, "used" has been idle at least as long, past its TTL.
	control, err := api.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{IdleTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reaper to remove the control sandbox", func() bool {
		_, err := api.Get(ctx, control.ID)
		return errors.Is(err, runbox.ErrSandboxNotFound)
	})
	if _, err := api.Get(ctx, used.ID); err != nil {
		t.Fatalf("the sandbox in MCP use was reaped: %v", err)
	}
	if r := toolOK(t, cs, "exec", map[string]any{"command": "echo $KEPT", "sandbox": "used"}); r["stdout"] != "yes\n" {
		t.Fatalf("exec after the reaper's passes: %v", r)
	}
	cs.Close()
	waitFor(t, "the reaper to remove the sandbox once the session ended", func() bool {
		_, err := api.Get(ctx, used.ID)
		return errors.Is(err, runbox.ErrSandboxNotFound)
	})
	// The reaper writes its audit row once the sandbox is gone.
	var last registry.AuditRow
	waitFor(t, "the reaper's audit row", func() bool {
		rows, _ := ts.store.Audit(ctx, registry.AuditFilter{Sandbox: used.ID})
		if len(rows) > 0 {
			last = rows[len(rows)-1]
		}
		return last.Kind == registry.KindReap
	})
	if !strings.Contains(last.Detail, "idle") {
		t.Errorf("last audit row %+v", last)
	}
}

// A session that goes quiet past the session idle time is ended, and its
// default sandbox removed.
func TestMCPIdleSessionEnds(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{SessionIdle: time.Second}))
	cs := ts.mustMCP(t, ts.token(t, "a"))
	sb := toolOK(t, cs, "exec", map[string]any{"command": "true"})["sandbox"].(string)
	waitFor(t, "the idle session's sandbox to be removed", func() bool {
		reg, onHost := ts.sandboxCount(t)
		return reg == 0 && onHost == 0
	})
	rows, err := ts.store.Audit(context.Background(), registry.AuditFilter{Sandbox: sb})
	if err != nil || len(rows) != 3 || rows[2].Kind != registry.KindDelete {
		t.Errorf("audit of the idle session's sandbox: %+v %v", rows, err)
	}
}

// Shutting the server down ends its MCP sessions and removes their
// default sandboxes, but not a sandbox made with keep.
func TestMCPShutdownEndsSessions(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	cs := ts.mustMCP(t, ts.token(t, "a"))
	toolOK(t, cs, "exec", map[string]any{"command": "true"})
	kept := toolOK(t, cs, "sandbox_create", map[string]any{"keep": true})["id"].(string)
	ts.stop()
	ts.stop = func() {}
	store, err := registry.Open(context.Background(), ts.home+"/runbox.db")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	recs, err := store.ListSandboxes(context.Background(), "")
	if err != nil || len(recs) != 1 || recs[0].ID != kept {
		t.Errorf("after shutdown: %+v %v, want only the kept %s", recs, err, kept)
	}
	if sbs, _ := (&host.Provider{Home: ts.home}).List(context.Background()); len(sbs) != 1 {
		t.Errorf("host sandboxes after shutdown: %+v", sbs)
	}
}

// /mcp keeps the MCP SDK's DNS-rebinding protection: a request that
// arrived on loopback naming another host is refused, even with a valid
// token, unless the server is configured with AnyHost (a reverse proxy on
// the same machine).
func TestMCPHostProtection(t *testing.T) {
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	for _, anyHost := range []bool{false, true} {
		ts := startServer(t, withMCP(server.MCPConfig{AnyHost: anyHost}))
		token := ts.token(t, "a")
		for _, host := range []string{"", "runbox.example.com"} {
			req, _ := http.NewRequest(http.MethodPost, ts.url+"/mcp", strings.NewReader(initialize))
			if host != "" {
				req.Host = host
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
				del, _ := http.NewRequest(http.MethodDelete, ts.url+"/mcp", nil)
				del.Host = req.Host
				del.Header.Set("Mcp-Session-Id", id)
				del.Header.Set("Authorization", "Bearer "+token)
				if r, err := http.DefaultClient.Do(del); err == nil {
					r.Body.Close()
				}
			}
			resp.Body.Close()
			refused := host != "" && !anyHost
			if got := resp.StatusCode == http.StatusForbidden; got != refused || (!refused && resp.StatusCode != http.StatusOK) {
				t.Errorf("AnyHost %v, Host %q: HTTP %d", anyHost, host, resp.StatusCode)
			}
		}
	}
}

// A session's default sandbox deleted through the API under it: the next
// call says so, and the one after gets a fresh default sandbox.
func TestMCPDefaultRemovedElsewhere(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	ctx := ctxT(t)
	token := ts.token(t, "a")
	api, err := client.NewServer(ts.url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	cs := ts.mustMCP(t, token)
	first := toolOK(t, cs, "exec", map[string]any{"command": "true"})["sandbox"].(string)
	if err := api.Remove(ctx, runbox.Sandbox{ID: first}, false); err != nil {
		t.Fatal(err)
	}
	if msg := toolFails(t, cs, "exec", map[string]any{"command": "true"}); !strings.Contains(msg, "no such sandbox") {
		t.Errorf("exec in the removed default sandbox: %q", msg)
	}
	second := toolOK(t, cs, "exec", map[string]any{"command": "echo again"})
	if second["sandbox"] == first || second["stdout"] != "again\n" {
		t.Errorf("exec after: %v", second)
	}
	cs.Close()
	waitFor(t, "the new default sandbox to be removed", func() bool {
		reg, onHost := ts.sandboxCount(t)
		return reg == 0 && onHost == 0
	})
}

// A model behind /mcp sees only the sandboxes its own session made: not
// its tenant's API-made sandboxes nor another session's, by id or name,
// unless its client binds the session to one (Runbox-Sandbox), which is
// then its only one. Before, every session of a tenant saw, ran in and
// could remove all of the tenant's sandboxes.
func TestMCPSessionSeesOnlyItsOwn(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{}))
	ctx := ctxT(t)
	token := ts.token(t, "a")
	api, err := client.NewServer(ts.url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	other, err := api.CreateSandbox(ctx, runbox.SandboxSpec{Name: "api-made"}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs1 := ts.mustMCP(t, token)
	mine := toolOK(t, cs1, "sandbox_create", map[string]any{"name": "session-one", "keep": true})["id"].(string)
	cs2 := ts.mustMCP(t, token)
	for _, key := range []string{other.ID, "api-made", mine, "session-one"} {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"exec", map[string]any{"command": "touch /workspace/pwned", "sandbox": key}},
			{"file_read", map[string]any{"path": "x", "sandbox": key}},
			{"exec_list", map[string]any{"sandbox": key}},
			{"sandbox_remove", map[string]any{"sandbox": key, "force": true}},
			{"sandbox_pause", map[string]any{"sandbox": key}},
			{"sandbox_fork", map[string]any{"sandbox": key}},
		} {
			if msg := toolFails(t, cs2, c.tool, c.args); !strings.Contains(msg, "no such sandbox") {
				t.Errorf("a second session, %s on %s: %q", c.tool, key, msg)
			}
		}
	}
	if l := toolOK(t, cs2, "sandbox_list", nil); len(l["sandboxes"].([]any)) != 0 {
		t.Errorf("a second session lists %v", l)
	}
	for _, id := range []string{other.ID, mine} {
		if _, err := api.Get(ctx, id); err != nil {
			t.Errorf("sandbox %s after the other session's attempts: %v", id, err)
		}
	}
	// A session its client binds to the API-made sandbox works in it alone.
	bound, err := mcptest.ConnectBound(ctx, ts.url+"/mcp", token, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer bound.Close()
	if r := toolOK(t, bound, "exec", map[string]any{"command": "echo bound"}); r["stdout"] != "bound\n" || r["sandbox"] != other.ID {
		t.Errorf("exec in the bound session: %v", r)
	}
	if msg := toolFails(t, bound, "exec", map[string]any{"command": "true", "sandbox": mine}); !strings.Contains(msg, "no such sandbox") {
		t.Errorf("the bound session reached another sandbox: %q", msg)
	}
}
