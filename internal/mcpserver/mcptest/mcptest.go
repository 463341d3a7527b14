// Package mcptest holds the MCP client flows that the tests of more than
// one package run against runbox's MCP server (the handler alone, and
// mounted in runbox serve).
package mcptest

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SessionCarriesOver runs session number i's flow: `export N=i; cd /`,
// then `echo mcp-$N $(pwd)`, each through the exec tool, and checks that
// the second sees what the first set (the session's shell carries cwd and
// environment) and that both exit 0. It returns the sandbox the calls ran
// in.
func SessionCarriesOver(ctx context.Context, cs *mcp.ClientSession, i int) (sandbox string, err error) {
	steps := []struct{ command, want string }{
		{fmt.Sprintf("export N=%d; cd /", i), ""},
		{"echo mcp-$N $(pwd)", fmt.Sprintf("mcp-%d /\n", i)},
	}
	for _, st := range steps {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": st.command}})
		if err != nil {
			return "", fmt.Errorf("session %d: %q: %w", i, st.command, err)
		}
		if res.IsError {
			return "", fmt.Errorf("session %d: %q: tool error: %s", i, st.command, ResultText(res))
		}
		out, _ := res.StructuredContent.(map[string]any)
		if code, _ := out["exit_code"].(float64); out["stdout"] != st.want || code != 0 || out["exit_code"] == nil {
			return "", fmt.Errorf("session %d: %q: %v", i, st.command, out)
		}
		sandbox, _ = out["sandbox"].(string)
	}
	return sandbox, nil
}

// Connect opens an MCP session over streamable HTTP to endpoint, sending
// token as the bearer of every request.
func Connect(ctx context.Context, endpoint, token string) (*mcp.ClientSession, error) {
	return ConnectBound(ctx, endpoint, token, "")
}

// ConnectBound is Connect with the session bound to the existing sandbox
// sandbox (the Runbox-Sandbox header on every request; none when "").
func ConnectBound(ctx context.Context, endpoint, token, sandbox string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "runbox-test", Version: "v0"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: bearer{token, sandbox, http.DefaultTransport}}}, nil)
}

// bearer adds an Authorization header, and a Runbox-Sandbox header when
// sandbox is set, to every request.
type bearer struct {
	token, sandbox string
	next           http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.sandbox != "" {
		r.Header.Set("Runbox-Sandbox", b.sandbox)
	}
	return b.next.RoundTrip(r)
}

// ResultText is the text of every text item of a tool result, one after
// the other: what a model reads.
func ResultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
