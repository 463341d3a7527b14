package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// serveProc is a real `runbox serve` (the host provider, a fresh home,
// workdirs allowed under one directory) on a free loopback port.
type serveProc struct {
	url, home, workdir string
	cmd                *exec.Cmd
	log                *lockedBuffer
	exited             chan struct{}
}

// startServe runs runbox serve and waits for it to serve. At the end it is
// stopped with SIGTERM; testHome then fails the test if a sandbox is left.
func startServe(t *testing.T) *serveProc {
	t.Helper()
	home, workdir := testHome(t)
	sp := &serveProc{home: home, workdir: workdir, log: &lockedBuffer{}, exited: make(chan struct{})}
	sp.cmd = exec.Command(runboxBin, "serve", "--providers", "host", "--allow-host-provider", "--listen", "127.0.0.1:0",
		"--workdir-root", workdir, "--reap-interval", "200ms")
	sp.cmd.Env = sp.env()
	pr, pw := io.Pipe()
	sp.cmd.Stderr = pw
	if err := sp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sp.cmd.Wait(); pw.Close(); close(sp.exited) }()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			sp.log.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.Addr
			}
		}
	}()
	t.Cleanup(func() {
		sp.cmd.Process.Signal(syscall.SIGTERM)
		<-sp.exited
		if t.Failed() {
			t.Logf("runbox serve's log:\n%s", sp.log)
		}
		os.RemoveAll(home + "-workspaces")
	})
	select {
	case a := <-addr:
		sp.url = "http://" + a
	case <-sp.exited:
		t.Fatalf("runbox serve exited: %s", sp.log)
	case <-time.After(time.Minute):
		t.Fatalf("runbox serve did not start: %s", sp.log)
	}
	return sp
}

// env is the environment of the server and of its admin commands.
func (sp *serveProc) env() []string {
	return append(os.Environ(), "RUNBOX_HOME="+sp.home, "DOCKER_HOST=unix://"+sp.home+"/no-docker.sock",
		"RUNBOX_HOST=", "RUNBOX_TOKEN=", "RUNBOX_PROVIDER=")
}

// runbox runs an admin command (token, audit) on the server's machine.
func (sp *serveProc) runbox(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(runboxBin, args...)
	cmd.Env = sp.env()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("runbox %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// token mints a token for tenant with runbox token create.
func (sp *serveProc) token(t *testing.T, tenant string) string {
	t.Helper()
	return strings.TrimSpace(sp.runbox(t, "token", "create", "--tenant", tenant))
}

// auditRow is a row of runbox audit --json.
type auditRow struct {
	Kind     string `json:"kind"`
	Sandbox  string `json:"sandbox"`
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code"`
	Outcome  string `json:"outcome"`
	Detail   string `json:"detail"`
}

// audit returns tenant's audit rows, oldest first.
func (sp *serveProc) audit(t *testing.T, tenant string) []auditRow {
	t.Helper()
	var rows []auditRow
	for _, l := range strings.Split(strings.TrimSpace(sp.runbox(t, "audit", "--json", "--tenant", tenant)), "\n") {
		if l == "" {
			continue
		}
		var r auditRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	return rows
}

// execRow returns the audit row of the exec of command.
func execRow(rows []auditRow, command string) (auditRow, bool) {
	for _, r := range rows {
		if r.Kind == "exec" && r.Command == command {
			return r, true
		}
	}
	return auditRow{}, false
}

// The official TypeScript SDK's client runs the whole flow over streamable
// HTTP against a real runbox serve's /mcp, with a token minted by runbox
// token create (and is refused with a wrong one); the execs are in serve's
// audit log, and no sandbox is left once the session ends.
func TestNodeClientServe(t *testing.T) {
	node := needNode(t)
	sp := startServe(t)
	runNode(t, node, "MODE=http", "URL="+sp.url+"/mcp", "TOKEN="+sp.token(t, "node"))
	eventually(t, "the session's sandbox is removed", func() bool { return len(hostSandboxes(t, sp.home)) == 0 })
	rows := sp.audit(t, "node")
	if r, ok := execRow(rows, "echo out; echo err >&2; exit 3"); !ok || r.ExitCode == nil || *r.ExitCode != 3 {
		t.Errorf("no exec row with exit 3 in serve's audit log: %+v", rows)
	}
	if last := rows[len(rows)-1]; last.Kind != "delete" {
		t.Errorf("last audit row %+v, want the session's sandbox deleted", last)
	}
}

// The same flow over stdio, with runbox mcp working through the runbox
// serve that RUNBOX_HOST names.
func TestNodeClientStdioThroughServe(t *testing.T) {
	node := needNode(t)
	sp := startServe(t)
	runNode(t, node, "MODE=stdio", "RUNBOX="+runboxBin, "WORKDIR="+sp.workdir,
		"RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+sp.token(t, "stdio"), "RUNBOX_HOME="+t.TempDir())
	eventually(t, "the session's sandbox is removed", func() bool { return len(hostSandboxes(t, sp.home)) == 0 })
	if _, ok := execRow(sp.audit(t, "stdio"), "echo out; echo err >&2; exit 3"); !ok {
		t.Errorf("the flow's exec is not in serve's audit log")
	}
}

// runbox mcp with RUNBOX_HOST runs its execs through runbox serve: in a
// sandbox of the server's (its registry, its workspaces), audited there;
// this machine's own providers see nothing. A wrong token is an error the
// model can read, not a session that works elsewhere.
func TestStdioThroughServe(t *testing.T) {
	sp := startServe(t)
	local := t.TempDir() // runbox mcp's own home: must stay empty
	start := func(token string) *mcp.ClientSession {
		cmd := exec.Command(runboxBin, "mcp")
		cmd.Env = append(os.Environ(), "RUNBOX_HOME="+local, "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+token, "RUNBOX_PROVIDER=")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "runbox-test", Version: "v0"}, nil).
			Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	cs := start(sp.token(t, "remote"))
	r := ok[execResult](t, cs, "exec", map[string]any{"command": "echo through-serve; pwd"})
	if !strings.HasPrefix(r.Stdout, "through-serve\n"+sp.home+"-workspaces/") || !strings.HasPrefix(r.Sandbox, "sb-") {
		t.Errorf("exec: %+v", r)
	}
	if n := len(hostSandboxes(t, local)); n != 0 {
		t.Errorf("%d sandboxes on runbox mcp's own machine", n)
	}
	if n := len(hostSandboxes(t, sp.home)); n != 1 {
		t.Errorf("%d sandboxes on the server, want 1", n)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	eventually(t, "the session's sandbox is removed", func() bool { return len(hostSandboxes(t, sp.home)) == 0 })
	rows := sp.audit(t, "remote")
	if row, found := execRow(rows, "echo through-serve; pwd"); !found || row.Sandbox != r.Sandbox || row.ExitCode == nil || *row.ExitCode != 0 {
		t.Errorf("serve's audit log: %+v", rows)
	}

	bad := start("not-a-token")
	defer bad.Close()
	if msg := failing(t, bad, "exec", map[string]any{"command": "true"}); !strings.Contains(msg, "token") {
		t.Errorf("exec with a wrong token: %q", msg)
	}
}

// runbox mcp with RUNBOX_HOST holds the tenant's token, the model does
// not: a session sees only the sandboxes it made. The tenant's own
// sandbox, made through the API, answers as one that never existed, and
// is still there afterwards.
func TestStdioThroughServeSeesOnlyItsOwn(t *testing.T) {
	sp := startServe(t)
	token := sp.token(t, "remote")
	api, err := client.NewServer(sp.url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	ctx := context.Background()
	name := randomName("api-")
	other, err := api.CreateSandbox(ctx, runbox.SandboxSpec{Name: name}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Remove(ctx, other, true)
	cmd := exec.Command(runboxBin, "mcp")
	cmd.Env = append(os.Environ(), "RUNBOX_HOME="+t.TempDir(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+token, "RUNBOX_PROVIDER=")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "runbox-test", Version: "v0"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, key := range []string{other.ID, name} {
		for tool, args := range map[string]map[string]any{
			"exec":           {"command": "true", "sandbox": key},
			"file_list":      {"sandbox": key},
			"sandbox_remove": {"sandbox": key, "force": true},
		} {
			if msg := failing(t, cs, tool, args); msg != fmt.Sprintf("no such sandbox: %q (sandbox_list shows the sandboxes; leave sandbox out to use this session's default)", key) {
				t.Errorf("%s on the tenant's API sandbox %s: %q", tool, key, msg)
			}
		}
	}
	if sb, err := api.Get(ctx, other.ID); err != nil || !sb.Alive {
		t.Errorf("the API sandbox after the session's attempts: %+v %v", sb, err)
	}
}
