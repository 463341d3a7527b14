package mcpserver_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nodeDir holds the Node.js client test: package.json and its lock file
// pin the official MCP TypeScript SDK; `npm ci` there installs it.
const nodeDir = "testdata/node"

// needNode returns the node binary when it and the SDK are installed. When
// they are not, the test fails if RUNBOX_REQUIRE_NODE=1 (CI) and skips
// otherwise, saying how to install them.
func needNode(t *testing.T) string {
	t.Helper()
	missing := ""
	node, err := exec.LookPath("node")
	if err != nil {
		missing = "node is not installed (apt-get install nodejs npm)"
	} else if _, err := os.Stat(filepath.Join(nodeDir, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		missing = "the MCP TypeScript SDK is not installed (cd internal/mcpserver/" + nodeDir + " && npm ci)"
	}
	if missing == "" {
		return node
	}
	if os.Getenv("RUNBOX_REQUIRE_NODE") == "1" {
		t.Fatalf("RUNBOX_REQUIRE_NODE=1 but %s", missing)
	}
	t.Skipf("%s; set RUNBOX_REQUIRE_NODE=1 to make this a failure", missing)
	return ""
}

// runNode runs the Node.js flow with env and fails the test unless it
// prints "flow ok"; then no process with the flow's marker may be left.
// With TRACE=1 the flow names each call on stderr, shown when it fails.
func runNode(t *testing.T, node string, env ...string) {
	t.Helper()
	m := marker()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "mcp_flow.mjs")
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(), append(env, "MARKER="+m, "TRACE=1")...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "flow ok") {
		t.Fatalf("node mcp_flow.mjs: %v\n%s", err, out)
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes of the flow's commands survive", n)
	}
}

// The official TypeScript SDK's client drives runbox mcp over stdio:
// schemas, results, the shell session, a timeout, a cancellation,
// background execs and the file tools; then a coding agent's loop (see
// agentLoop in mcp_flow.mjs) with a 5 s client request timeout.
func TestNodeClientStdio(t *testing.T) {
	node := needNode(t)
	home, workdir := testHome(t)
	runNode(t, node, "MODE=stdio", "RUNBOX="+runboxBin, "WORKDIR="+workdir,
		"RUNBOX_HOME="+home, "DOCKER_HOST=unix://"+home+"/no-docker.sock")
	if sbs := hostSandboxes(t, home); len(sbs) != 0 {
		t.Errorf("sandboxes left after the session: %v", sbs)
	}
}

// Issue 29's command, "echo working; sleep 65", with the TypeScript SDK's
// default request timeout (60 s), over stdio: exec returns its first output
// with the command still running, exec_output its end and exit status.
// Before, the call failed with "Request timed out" after 60 s, no output,
// and the command was killed.
func TestNodeClientDefaultRequestTimeout(t *testing.T) {
	node := needNode(t)
	home, workdir := testHome(t)
	runNode(t, node, "FLOW=long", "MODE=stdio", "RUNBOX="+runboxBin, "WORKDIR="+workdir,
		"RUNBOX_HOME="+home, "DOCKER_HOST=unix://"+home+"/no-docker.sock")
}

// The same flow over streamable HTTP with a bearer token; a wrong token is
// refused.
func TestNodeClientHTTP(t *testing.T) {
	node := needNode(t)
	h := startHTTP(t)
	runNode(t, node, "MODE=http", "URL="+h.url+"/", "TOKEN=token-a")
	eventually(t, "the session's sandbox is removed", func() bool { return len(hostSandboxes(t, h.homeA)) == 0 })
}
