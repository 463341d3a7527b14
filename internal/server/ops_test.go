package server_test

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/server"
	"github.com/runbox/runbox/provider/host"
)

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr          string
		tls, insecure bool
		refused       bool
	}{
		{"127.0.0.1:7070", false, false, false},
		{"[::1]:7070", false, false, false},
		{"localhost:7070", false, false, false},
		{"0.0.0.0:7070", false, false, true},
		{":7070", false, false, true},
		{"10.1.2.3:7070", false, false, true},
		{"0.0.0.0:7070", true, false, false},
		{"0.0.0.0:7070", false, true, false},
	} {
		err := server.CheckListen(c.addr, c.tls, c.insecure)
		if refused := errors.Is(err, server.ErrInsecureListen); refused != c.refused {
			t.Errorf("CheckListen(%q, tls %v, insecure %v) = %v", c.addr, c.tls, c.insecure, err)
		}
	}
}

// TestGracefulShutdown: a unary Run in flight when the server is told to
// stop finishes and answers; the sandbox keeps running.
func TestGracefulShutdown(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "sleep 1; echo finished"})
		done <- outcome{res, err}
	}()
	waitFor(t, "the exec to run", func() bool {
		got, err := srv.Get(ctx, sb.ID)
		return err == nil && got.Detail["running_execs"] == "1"
	})
	ts.stop()
	o := <-done
	if o.err != nil || string(o.res.Stdout) != "finished\n" {
		t.Fatalf("Run across a graceful shutdown: %+v, %v", o.res, o.err)
	}
	// The server is gone: ask the provider.
	sbs, err := (&host.Provider{Home: ts.home}).List(ctx)
	if err != nil || len(sbs) != 1 || !sbs[0].Alive {
		t.Fatalf("after shutdown the sandbox is %+v, %v", sbs, err)
	}
	ts.start(t) // for the cleanup
}

// TestMetrics: the operator's /metrics has the execs by outcome, their durations, the stop
// latency of a timed-out exec, sandboxes by provider and state, and API
// latency by procedure.
func TestMetrics(t *testing.T) {
	ts := startServer(t, func(c *serverConfig) { c.OperatorTenant = "a" })
	ctx := ctxT(t)
	tok := ts.token(t, "a")
	srv, _ := client.NewServer(ts.url, tok)
	defer srv.Close()
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "exit 2"})
	srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "sleep 30", Timeout: 200 * time.Millisecond, Grace: time.Second})
	req, _ := http.NewRequest("GET", ts.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`runbox_execs_total{outcome="exited"} 1`,
		`runbox_execs_total{outcome="timed_out"} 1`,
		`runbox_exec_duration_seconds_count 2`,
		`runbox_exec_stop_seconds_count 1`,
		`runbox_sandboxes{provider="host",state="ready"} 1`,
		`runbox_sandboxes{provider="host",state="lost"} 0`,
		`runbox_running_execs 0`,
		`runbox_api_request_duration_seconds_count{code="ok",procedure="/runbox.v1.SandboxService/Run"} 2`,
		`runbox_api_request_duration_seconds_count{code="ok",procedure="/runbox.v1.SandboxService/Create"} 1`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m := regexp.MustCompile(`runbox_exec_stop_seconds_sum ([0-9.e+-]+)`).FindStringSubmatch(string(body))
	if m == nil {
		t.Fatal("no stop latency sum")
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 {
		t.Errorf("stop latency %v", v)
	}
}

// TestMetricsPerTenant: a tenant's /metrics shows only its own sandboxes
// and execs (alice one sandbox and one exec, bob one sandbox and three),
// the operator's the sum. Before the fix every tenant saw the server's
// totals.
func TestMetricsPerTenant(t *testing.T) {
	ts := startServer(t, func(c *serverConfig) { c.OperatorTenant = "ops" })
	ctx := ctxT(t)
	scrape := func(tok string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %s: %s", resp.Status, body)
		}
		return string(body)
	}
	toks := map[string]string{}
	for name, execs := range map[string]int{"alice": 1, "bob": 3} {
		toks[name] = ts.token(t, name)
		srv, _ := client.NewServer(ts.url, toks[name])
		defer srv.Close()
		sb, err := srv.Create(ctx, runbox.SandboxSpec{})
		if err != nil {
			t.Fatal(err)
		}
		for range execs {
			if _, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		tok            string
		execs, sandbox int
	}{{toks["alice"], 1, 1}, {toks["bob"], 3, 1}, {ts.token(t, "ops"), 4, 2}} {
		body := scrape(c.tok)
		for _, want := range []string{
			`runbox_execs_total{outcome="exited"} ` + strconv.Itoa(c.execs) + "\n",
			`runbox_sandboxes{provider="host",state="ready"} ` + strconv.Itoa(c.sandbox) + "\n",
			"runbox_running_execs 0\n",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("tenant with %d execs: /metrics lacks %q:\n%s", c.execs, want, body)
			}
		}
	}
	if body := scrape(toks["alice"]); strings.Contains(body, "runbox_api_request_duration_seconds") ||
		strings.Contains(body, "runbox_auth_failures_total") {
		t.Errorf("a tenant's /metrics has server-wide figures:\n%s", body)
	}
}
