package server_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/registry"
)

// TestExecThroughServer runs execs through the server with the Go client:
// streamed output, exit codes, a timeout, files, and the audit rows they
// leave.
func TestExecThroughServer(t *testing.T) {
	ts := startServer(t)
	srv := ts.tenant(t, "acme")
	ctx := ctxT(t)
	sb, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Sandbox(sb.ID)
	defer c.Close()

	var out bytes.Buffer
	res, err := c.Exec(ctx, "for i in 1 2 3; do echo line $i; done; echo err >&2; exit 7", client.WithStdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || out.String() != "line 1\nline 2\nline 3\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("result %+v, streamed %q", res, out.String())
	}
	res, err = c.Exec(ctx, "sleep 30", client.WithTimeout(300*time.Millisecond), client.WithGrace(time.Second))
	if err != nil || !res.TimedOut || res.ExitCode != 143 {
		t.Fatalf("timeout: %+v, %v", res, err)
	}
	if _, err := c.WriteFile(ctx, "/tmp/x-"+sb.ID, strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	// Run, unary.
	r, recreated, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "cat /tmp/x-" + sb.ID})
	if err != nil || recreated || string(r.Stdout) != "hello" {
		t.Fatalf("Run = %+v, %v, %v", r, recreated, err)
	}
	rows, err := ts.store.Audit(ctx, registry.AuditFilter{Sandbox: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	var execs []registry.AuditRow
	for _, row := range rows {
		if row.Kind == registry.KindExec {
			execs = append(execs, row)
		}
	}
	if len(execs) != 3 {
		t.Fatalf("%d exec rows, want 3: %+v", len(execs), rows)
	}
	if e := execs[0]; e.ExitCode == nil || *e.ExitCode != 7 || e.Ended.IsZero() || e.StdoutBytes != 21 || e.Tenant != "acme" {
		t.Fatalf("first row %+v", e)
	}
	if e := execs[1]; !e.TimedOut || e.Outcome != registry.OutcomeTimedOut || e.Command != "sleep 30" {
		t.Fatalf("timeout row %+v", e)
	}
	if err := srv.Remove(ctx, sb, false); err != nil {
		t.Fatal(err)
	}
}
