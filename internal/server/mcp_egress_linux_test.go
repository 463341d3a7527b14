package server_test

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/server"
)

// TestMCPNetworkSet: over /mcp, a session's private local sandbox (the
// operator pinned pkg.test to the host's loopback and let its range be
// reached, but allowed no name) cannot fetch from pkg.test through its
// proxy; after network_set allows pkg.test (within the operator's
// *.test) the next fetch works, and after network_set allows nothing it is
// refused again. A name past the operator's ceiling, a malformed name, an
// unknown sandbox and another session's sandbox are tool errors that
// change nothing.
func TestMCPNetworkSet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local provider's private network needs root here (a network namespace of its own)")
	}
	marker, port := markerServer(t)

	operator := runbox.EgressPolicy{AllowCIDR: []string{"127.0.0.1/32"}, Resolve: map[string]string{"pkg.test": "127.0.0.1"}}
	ts := startServer(t, onLocalProvider(t), func(c *serverConfig) {
		c.EgressCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	}, withMCP(server.MCPConfig{Server: mcpserver.Config{
		Spec:   runbox.SandboxSpec{Egress: operator},
		Limits: mcpserver.Limits{Network: "private", Networks: []string{"private"}, Allow: []string{"*.test"}},
	}}))
	tok := ts.token(t, "a")
	cs := ts.mustMCP(t, tok)
	fetch := map[string]any{"command": fmt.Sprintf(
		`python3 -c "import urllib.request; print(urllib.request.urlopen('http://pkg.test:%d/', timeout=20).read().decode())"`, port)}
	fetched := func(cs *mcp.ClientSession) bool {
		t.Helper()
		out := toolOK(t, cs, "exec", fetch)
		ok := out["exit_code"] == float64(0) && strings.TrimSpace(fmt.Sprint(out["stdout"])) == marker
		if !ok && out["exit_code"] == float64(0) {
			t.Fatalf("the fetch exited 0 without the page: %v", out)
		}
		return ok
	}
	if fetched(cs) {
		t.Fatal("before network_set the fetch must be refused: the operator allowed no name")
	}

	out := toolOK(t, cs, "network_set", map[string]any{"allow": []string{"pkg.test"}})
	sbID, _ := out["sandbox"].(string)
	if fmt.Sprint(out["allow"]) != "[pkg.test]" || sbID == "" {
		t.Errorf("network_set allow pkg.test: %v", out)
	}
	if !fetched(cs) {
		t.Fatal("after network_set allowed pkg.test the fetch must work")
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"allow": []string{"pkg.test", "evil.example"}}, "*.test"},
		{map[string]any{"allow": []string{"*"}}, "*.test"},
		{map[string]any{"allow": []string{"bad name.test"}}, "bad name.test"},
		{map[string]any{"allow": []string{""}}, "empty"},
		{map[string]any{"sandbox": "nosuch", "allow": []string{"pkg.test"}}, "nosuch"},
	} {
		if msg := toolFails(t, cs, "network_set", c.args); !strings.Contains(msg, c.want) {
			t.Errorf("network_set %v: %q, want it to name %q", c.args, msg, c.want)
		}
	}
	other := ts.mustMCP(t, tok)
	if msg := toolFails(t, other, "network_set", map[string]any{"sandbox": sbID, "allow": []string{}}); !strings.Contains(msg, sbID) {
		t.Errorf("network_set on another session's sandbox: %q, want not found naming %s", msg, sbID)
	}
	if !fetched(cs) {
		t.Fatal("refused network_set calls changed the policy: the fetch no longer works")
	}

	if out := toolOK(t, cs, "network_set", map[string]any{"allow": []string{}}); fmt.Sprint(out["allow"]) != "[]" {
		t.Errorf("network_set allow []: %v", out)
	}
	if fetched(cs) {
		t.Error("after network_set allowed nothing the fetch must be refused again")
	}
}

// TestMCPNetworkSetCannotWiden: a model's network_set names are held to
// the operator's --mcp-allow (*.test) whatever their spelling: another
// domain in upper case, with a trailing dot, as a wildcard ("*",
// "*.example", "**.test", "x*.test", "*.*.test"), an IP literal (IPv4,
// IPv6, IPv4-mapped), the domain smuggled before ".test" behind NUL, "/",
// ":", "#", a space or a newline, an ideographic full stop, or over a
// thousand bytes: each is a tool error and the policy in force (a name
// within the operator's list set first, the control) is unchanged.
func TestMCPNetworkSetCannotWiden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local provider's private network needs root here (a network namespace of its own)")
	}
	ts := startServer(t, onLocalProvider(t), withMCP(server.MCPConfig{Server: mcpserver.Config{
		Limits: mcpserver.Limits{Network: "private", Networks: []string{"private"}, Allow: []string{"*.test"}},
	}}))
	tok := ts.token(t, "a")
	cs := ts.mustMCP(t, tok)
	control := "ok-" + strings.ToLower(rand.Text()[:8]) + ".test"
	out := toolOK(t, cs, "network_set", map[string]any{"allow": []string{control}})
	sbID, _ := out["sandbox"].(string)
	for _, name := range []string{
		"EVIL.EXAMPLE", "evil.example.", "*", "*.example", "**.test", "x*.test", "*.*.test", "test", ".test",
		"127.0.0.1", "::1", "::ffff:127.0.0.1", "[::1]", "169.254.169.254",
		"evil.example\x00.test", "evil.example/.test", "evil.example:80.test", "evil.example#.test",
		"evil.example .test", "evil.example\n.test", "evil.example\u3002test", strings.Repeat("a", 1100) + ".test.evil",
	} {
		res := tool(t, cs, "network_set", map[string]any{"allow": []string{control, name}})
		if !res.IsError {
			t.Errorf("network_set %q under --mcp-allow *.test: accepted", name)
		}
	}
	api, err := client.NewServer(ts.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	got, err := api.Get(ctxT(t), sbID)
	if err != nil || got.Detail["egress_allow"] != control {
		t.Errorf("the policy after the refused calls: %v %v, want allow %s", got.Detail, err, control)
	}
}
