package server_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/registry"
)

// refusalRows returns the egress-refused rows f selects, with their
// details decoded.
func refusalRows(t *testing.T, ts *testServer, f registry.AuditFilter) ([]registry.AuditRow, []egress.Refused) {
	t.Helper()
	rows, err := ts.store.Audit(ctxT(t), f)
	if err != nil {
		t.Fatal(err)
	}
	var out []registry.AuditRow
	var rs []egress.Refused
	for _, r := range rows {
		if r.Kind != registry.KindEgressRefused {
			continue
		}
		var d egress.Refused
		if err := json.Unmarshal([]byte(r.Detail), &d); err != nil {
			t.Fatalf("row %d's detail %q: %v", r.ID, r.Detail, err)
		}
		out, rs = append(out, r), append(rs, d)
	}
	return out, rs
}

// TestEgressRefusalsAuditedThroughServe: a command in a private local
// sandbox made through serve is refused (a plain http:// request, and 40
// CONNECTs in a row); serve records each as its tenant's audit row naming
// the sandbox, the host:port asked for and the rule (the 40 coalesced by
// the host side, their counts summing to exactly 40), readable by
// `runbox audit --tenant` of that tenant and not of another.
func TestEgressRefusalsAuditedThroughServe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local provider's private network needs root here (a network namespace of its own)")
	}
	ts := startServer(t, onLocalProvider(t), func(c *serverConfig) { c.EgressAuditInterval = 50 * time.Millisecond })
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	ts.tenant(t, "b")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{Network: "private"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(ctx, sb, true)
	tag := strings.ToLower(rand.Text()[:12])
	name, storm := "denied-"+tag+".test", "storm-"+tag+".test"
	port := 20000 + mrand.IntN(40000)
	res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fmt.Sprintf("curl -sS --max-time 20 http://%s:%d/x", name, port)})
	rule := name + " is not in the --allow list"
	if err != nil || !strings.Contains(string(res.Stdout), rule) {
		t.Fatalf("the refused command is told the rule: %+v %s %v", res, res.Stderr, err)
	}
	const n = 40
	res, _, err = srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: fmt.Sprintf("for i in $(seq %d); do curl -s -p --max-time 20 -o /dev/null http://%s:%d/; done", n, storm, port)})
	if err != nil {
		t.Fatalf("the storm: %+v %v", res, err)
	}
	var rows []registry.AuditRow
	var rs []egress.Refused
	for {
		rows, rs = refusalRows(t, ts, registry.AuditFilter{Tenant: "a", Sandbox: sb.ID})
		var one, many int64
		for _, r := range rs {
			switch r.Host {
			case name:
				one += r.Count
			case storm:
				many += r.Count
			}
		}
		if one >= 1 && many >= n {
			if one != 1 || many != n {
				t.Errorf("counted %d and %d refusals, want 1 and %d", one, many, n)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no audit rows for the refusals (%d and %d of 1 and %d counted): %+v", one, many, n, rs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, r := range rs {
		row := rows[i]
		if row.Tenant != "a" || row.Sandbox != sb.ID || row.Outcome != registry.OutcomeRefused || row.Started.IsZero() || row.Ended.Before(row.Started) {
			t.Errorf("row %+v", row)
		}
		switch r.Host {
		case name:
			if r.Port != port || r.Rule != rule || r.Via != "http" {
				t.Errorf("the refused request's row: %+v", r)
			}
		case storm:
			if r.Port != port || r.Rule != storm+" is not in the --allow list" || r.Via != "connect" {
				t.Errorf("a refused CONNECT's row: %+v", r)
			}
		default:
			t.Errorf("a refusal nobody made: %+v", r)
		}
	}
	if other, _ := refusalRows(t, ts, registry.AuditFilter{Tenant: "b"}); len(other) != 0 {
		t.Errorf("tenant b sees a's refusals: %+v", other)
	}
	// runbox audit reads them for a, not for b.
	audit := func(tenant string) string {
		var out, errs bytes.Buffer
		if code := servercli.Main(ctx, []string{"audit", "--db", filepath.Join(ts.home, "runbox.db"), "--tenant", tenant, "--json"}, nil, &out, &errs); code != 0 {
			t.Fatalf("runbox audit --tenant %s: exit %d, %s", tenant, code, errs.String())
		}
		return out.String()
	}
	if out := audit("a"); !strings.Contains(out, `"kind":"egress-refused"`) || !strings.Contains(out, name) || !strings.Contains(out, sb.ID) {
		t.Errorf("runbox audit --tenant a:\n%s", out)
	}
	if out := audit("b"); strings.Contains(out, name) || strings.Contains(out, "egress-refused") {
		t.Errorf("runbox audit --tenant b shows a's refusals:\n%s", out)
	}
}
