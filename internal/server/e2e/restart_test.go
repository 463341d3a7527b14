package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// checkNumbered checks that out holds "line 1" to "line n", each once.
func checkNumbered(t *testing.T, what, out string, n int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%s: %d lines, want %d", what, len(lines), n)
	}
	for i, l := range lines {
		if l != "line "+strconv.Itoa(i+1) {
			t.Fatalf("%s: line %d is %q", what, i+1, l)
		}
	}
}

// TestKillServerMidExec: SIGKILL runbox serve while an exec streams
// numbered lines, start it again: the client's Wait, and a fresh Attach
// through the new server, get every line exactly once and the real exit
// code, and the audit row is completed.
func TestKillServerMidExec(t *testing.T) {
	sp := startServe(t)
	ctx := ctxT(t)
	srv := sp.server("a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Sandbox(sb.ID, client.WithReconnectWindow(time.Minute))
	defer c.Close()
	const n = 200
	var out syncBuffer
	p, err := c.Start(ctx, fmt.Sprintf("for i in $(seq 1 %d); do echo line $i; sleep 0.02; done; exit 3", n), client.WithStdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.Wait(ctx)
		done <- outcome{res, err}
	}()
	waitFor(t, "output", func() bool { return strings.Count(out.String(), "\n") >= 10 })
	sp.kill(syscall.SIGKILL)
	if got := strings.Count(out.String(), "\n"); got >= n {
		t.Fatalf("the exec ended (%d lines) before the server was killed", got)
	}
	sp.start()
	o := <-done
	if o.err != nil || o.res.ExitCode != 3 {
		t.Fatalf("Wait across the kill: %+v, %v", o.res, o.err)
	}
	checkNumbered(t, "streamed across the kill", out.String(), n)

	// A new client re-attaches from the start: the whole output, once.
	c2 := srv.Sandbox(sb.ID)
	defer c2.Close()
	var replay bytes.Buffer
	res, err := c2.Attach(ctx, p.ID(), client.WithFromSeq(1), client.WithStdout(&replay))
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("attach after the restart: %+v, %v", res, err)
	}
	checkNumbered(t, "replayed", replay.String(), n)

	waitFor(t, "the audit row", func() bool {
		for _, r := range sp.auditRows("--sandbox", sb.ID) {
			if r["kind"] == "exec" && r["exec_id"] == p.ID() && r["ended"] != nil {
				if r["exit_code"] != float64(3) || r["stdout_bytes"] != float64(o.res.StdoutBytes) || r["outcome"] != "exited" {
					t.Fatalf("audit row %v", r)
				}
				return true
			}
		}
		return false
	})
}

// TestUnknownSandboxReported: a sandbox the providers have but the
// registry does not is reported at start and left alone.
func TestUnknownSandboxReported(t *testing.T) {
	sp := startServe(t)
	ctx := ctxT(t)
	hp := &host.Provider{Home: sp.home}
	stray, err := hp.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sp.kill(syscall.SIGTERM)
	sp.start()
	if !strings.Contains(sp.log.String(), "not in the registry") || !strings.Contains(sp.log.String(), stray.ID) {
		t.Fatalf("the stray sandbox was not reported:\n%s", sp.log.String())
	}
	tok := sp.token("a")
	req, _ := http.NewRequest("GET", sp.url+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ready struct {
		Ready   bool                  `json:"ready"`
		Unknown []struct{ ID string } `json:"unknown_sandboxes"`
	}
	if err := json.Unmarshal(body, &ready); err != nil || !ready.Ready || len(ready.Unknown) != 1 || ready.Unknown[0].ID != stray.ID {
		t.Fatalf("/readyz: %s", body)
	}
	if sp.metric("runbox_unknown_sandboxes") != 1 {
		t.Fatal("runbox_unknown_sandboxes is not 1")
	}
	// Not adopted: no tenant sees it; not deleted: it still answers.
	if l, err := sp.server("a").List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("tenant sees %v, %v", l, err)
	}
	got, err := hp.Get(ctx, stray.ID)
	if err != nil || !got.Alive {
		t.Fatalf("the stray sandbox after the server's start: %+v, %v", got, err)
	}
	_ = context.Background
}
