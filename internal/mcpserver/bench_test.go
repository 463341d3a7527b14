package mcpserver_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// BenchmarkExecTrue measures exec("true") on a host sandbox, round trip:
//
//   - client: the Go client's Exec, the baseline;
//   - client-session: the same in a shell session with the output limits
//     the MCP server asks for (what its exec does on the wire);
//   - mcp-stdio: the exec tool of a real `runbox mcp` process, called
//     through the Go SDK's client over stdio.
//
// Run: go test -run '^$' -bench BenchmarkExecTrue -benchtime 300x -count 5 ./internal/mcpserver/
func BenchmarkExecTrue(b *testing.B) {
	ctx := context.Background()
	b.Run("client", func(b *testing.B) {
		c := hostClient(b)
		for b.Loop() {
			if r, err := c.Exec(ctx, "true"); err != nil || !r.OK() {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("client-session", func(b *testing.B) {
		c := hostClient(b)
		for b.Loop() {
			r, err := c.Exec(ctx, "true", client.WithSession("bench"), client.WithTimeout(2*time.Minute),
				client.WithOutputLimits(16<<10, 16<<10))
			if err != nil || !r.OK() {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("mcp-stdio", func(b *testing.B) {
		cs := benchStdio(b)
		args := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}}
		if _, err := cs.CallTool(ctx, args); err != nil { // makes the sandbox
			b.Fatal(err)
		}
		for b.Loop() {
			res, err := cs.CallTool(ctx, args)
			if err != nil || res.IsError {
				b.Fatal(res, err)
			}
		}
	})
}

// hostClient makes a host sandbox in a fresh home and returns a client.
func hostClient(b *testing.B) *client.Client {
	b.Helper()
	home, err := os.MkdirTemp("", "rbb")
	if err != nil {
		b.Fatal(err)
	}
	p := &host.Provider{Home: home}
	sb, err := p.Create(context.Background(), runbox.SandboxSpec{Workdir: os.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	c := client.New(p.Dialer(sb))
	b.Cleanup(func() {
		c.Close()
		_ = p.Remove(context.Background(), sb, true)
		os.RemoveAll(home)
	})
	return c
}

// benchStdio starts runbox mcp on a host sandbox and connects to it.
func benchStdio(b *testing.B) *mcp.ClientSession {
	b.Helper()
	home, err := os.MkdirTemp("", "rbb")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(runboxBin, "mcp", "--provider", "host", "--allow-host", "--workdir", os.TempDir())
	cmd.Env = append(os.Environ(), "RUNBOX_HOME="+home, "DOCKER_HOST=unix://"+home+"/no-docker.sock", "KUBECONFIG="+home+"/no-kubeconfig")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v0"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cs.Close()
		os.RemoveAll(home)
	})
	return cs
}
