package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/host"
)

// TestMain builds runboxd once, exports it as $RUNBOX_RUNBOXD, removes the
// binaries built for the tests, and checks for leaked goroutines at the end.
func TestMain(m *testing.M) { os.Exit(mainCode(m)) }

func mainCode(m *testing.M) int {
	defer providertest.RemoveBuild()
	path, err := providertest.BuildRunboxd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Setenv(providertest.RunboxdEnv, path)
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	return code
}

var bins struct {
	once sync.Once
	dir  string
}

// binDir builds runbox, runbox-full, runbox-server (which runs serve,
// token and audit) and runboxd once for the package's tests.
func binDir(t testing.TB) string {
	t.Helper()
	bins.once.Do(func() {
		dir, err := os.MkdirTemp("", "rbe2e-bin")
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range []string{"runbox", "runbox-full", "runbox-server", "runboxd"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "github.com/runbox/runbox/cmd/"+pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build %s: %v\n%s", pkg, err, out)
			}
		}
		bins.dir = dir
	})
	if bins.dir == "" {
		t.Fatal("binaries were not built")
	}
	return bins.dir
}

// serveProc is a real runbox serve process with its home and database.
type serveProc struct {
	t      testing.TB
	bin    string
	home   string
	db     string
	addr   string // host:port
	url    string
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	ops    string // a token of the operator's tenant, made on first use
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe starts runbox serve with the host provider on a free
// loopback port; extra flags are added.
func startServe(t testing.TB, extra ...string) *serveProc {
	t.Helper()
	home, err := os.MkdirTemp("", "rbe")
	if err != nil {
		t.Fatal(err)
	}
	sp := &serveProc{t: t, bin: filepath.Join(binDir(t), "runbox"), home: home, db: filepath.Join(home, "runbox.db"), addr: "127.0.0.1:0"}
	sp.start(extra...)
	t.Cleanup(func() {
		sp.kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("server log:\n%s", sp.log.String())
		}
		p := &host.Provider{Home: home}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sbs, _ := p.List(ctx)
		for _, sb := range sbs {
			p.Remove(ctx, sb, true)
		}
		os.RemoveAll(home)
		os.RemoveAll(home + "-workspaces")
	})
	return sp
}

// env is the environment the server and its admin commands run with: the
// test's home, no docker engine (so nothing here touches other tests'
// containers).
func (sp *serveProc) env() []string {
	return append(os.Environ(), "RUNBOX_HOME="+sp.home, "RUNBOX_RUNBOXD="+filepath.Join(binDir(sp.t), "runboxd"),
		"DOCKER_HOST=unix://"+sp.home+"/no-docker.sock", "RUNBOX_HOST=", "RUNBOX_TOKEN=", "RUNBOX_PROVIDER=")
}

// start runs the server (again, on the same address after the first run)
// and waits for its "serving" log line.
func (sp *serveProc) start(extra ...string) {
	t := sp.t
	t.Helper()
	args := append([]string{"serve", "--providers", "host", "--allow-host-provider", "--listen", sp.addr, "--db", sp.db, "--reap-interval", "200ms", "--operator-tenant", "ops"}, extra...)
	cmd := exec.Command(sp.bin, args...)
	cmd.Env = sp.env()
	pr, pw := io.Pipe()
	if sp.log == nil {
		sp.log = &syncBuffer{} // one log across restarts
	}
	log := sp.log
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sp.cmd, sp.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); pw.Close(); close(sp.exited) }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		sp.addr, sp.url = a, "http://"+a
	case <-sp.exited:
		t.Fatalf("runbox serve exited: %s", sp.log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("runbox serve did not start: %s", sp.log.String())
	}
}

// kill signals the server and waits for it to exit.
func (sp *serveProc) kill(sig syscall.Signal) {
	if sp.cmd == nil {
		return
	}
	sp.cmd.Process.Signal(sig)
	<-sp.exited
	sp.cmd = nil
}

// runbox runs the runbox binary with the server's environment plus env.
func (sp *serveProc) runbox(env []string, args ...string) (stdout, stderr string, code int) {
	sp.t.Helper()
	cmd := exec.Command(sp.bin, args...)
	cmd.Env = append(sp.env(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		sp.t.Fatalf("runbox %q: %v", args, err)
	}
	return o.String(), e.String(), code
}

// token makes a token for tenant with runbox token create.
func (sp *serveProc) token(tenant string) string {
	sp.t.Helper()
	out, errOut, code := sp.runbox(nil, "token", "create", "--tenant", tenant, "--db", sp.db)
	if code != 0 {
		sp.t.Fatalf("token create: %d %s", code, errOut)
	}
	return strings.TrimSpace(out)
}

// server returns a Go client of the server for a fresh token of tenant.
func (sp *serveProc) server(tenant string) *client.Server {
	sp.t.Helper()
	s, err := client.NewServer(sp.url, sp.token(tenant))
	if err != nil {
		sp.t.Fatal(err)
	}
	sp.t.Cleanup(func() { s.Close() })
	return s
}

// metric reads one unlabelled metric's value from the server-wide
// /metrics of the operator's tenant (ops).
func (sp *serveProc) metric(name string) float64 {
	sp.t.Helper()
	if sp.ops == "" {
		sp.ops = sp.token("ops")
	}
	token := sp.ops
	req, _ := http.NewRequest("GET", sp.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		sp.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var v float64
		if strings.HasPrefix(sc.Text(), name+" ") {
			fmt.Sscan(strings.TrimPrefix(sc.Text(), name+" "), &v)
			return v
		}
	}
	sp.t.Fatalf("no metric %s", name)
	return 0
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// auditRows reads runbox audit --json.
func (sp *serveProc) auditRows(args ...string) []map[string]any {
	sp.t.Helper()
	out, errOut, code := sp.runbox(nil, append([]string{"audit", "--json", "--db", sp.db}, args...)...)
	if code != 0 {
		sp.t.Fatalf("audit: %d %s", code, errOut)
	}
	var rows []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			sp.t.Fatalf("audit line %q: %v", l, err)
		}
		rows = append(rows, m)
	}
	return rows
}

var _ = runbox.ErrSandboxLost
