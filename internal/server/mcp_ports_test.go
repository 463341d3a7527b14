package server_test

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/server"
)

// TestMCPPortExpose: over /mcp, port_expose opens a dev server started by
// the model in its sandbox and returns URLs that reach it (with the
// token, and signed without it); a port not exposed stays closed.
func TestMCPPortExpose(t *testing.T) {
	ts := startServer(t, withMCP(server.MCPConfig{Server: mcpserver.Config{Limits: mcpserver.Limits{Networks: []string{"private"}, Allow: []string{"*.python.org"}}}}))
	tok := ts.token(t, "a")
	cs := ts.mustMCP(t, tok)
	port := 40000 + mrand.IntN(9999)
	mark := rand.Text()
	toolOK(t, cs, "exec", map[string]any{"command": fmt.Sprintf(
		"mkdir -p site && echo %s > site/hello.txt && (cd site && nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 &)", mark, port)})
	defer toolOK(t, cs, "exec", map[string]any{"command": fmt.Sprintf("pkill -f 'http.server %d' || true", port)})
	out := toolOK(t, cs, "port_expose", map[string]any{"port": port})
	u, _ := out["url"].(string)
	su, _ := out["signed_url"].(string)
	if !strings.HasPrefix(u, ts.url+"/sandboxes/sb-") || !strings.HasSuffix(u, fmt.Sprintf("/ports/%d/", port)) || !strings.HasPrefix(su, u+"?") {
		t.Fatalf("port_expose: %v", out)
	}
	var code int
	var body string
	for i := 0; i < 100; i++ {
		if code, body, _ = get(t, u+"hello.txt", "Authorization", "Bearer "+tok); code == 200 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != 200 || strings.TrimSpace(body) != mark {
		t.Fatalf("port_expose's url with the token: %d %q", code, body)
	}
	signed, _ := url.Parse(su)
	signed.Path += "hello.txt"
	if code, body, _ = get(t, signed.String()); code != 200 || strings.TrimSpace(body) != mark {
		t.Errorf("port_expose's signed url: %d %q", code, body)
	}
	closed := strings.Replace(u, fmt.Sprintf("/ports/%d/", port), fmt.Sprintf("/ports/%d/", port+1), 1)
	if code, body, _ = get(t, closed, "Authorization", "Bearer "+tok); code != 403 {
		t.Errorf("a port the model did not expose: %d %q, want 403", code, body)
	}
	if msg := toolFails(t, cs, "sandbox_create", map[string]any{"network": "private", "allow": []string{"evil.example"}}); !strings.Contains(msg, "*.python.org") {
		t.Errorf("an allow outside the operator's: %q", msg)
	}
}
