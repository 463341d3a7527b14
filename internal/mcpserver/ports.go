package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
)

// PortExposer is a Sandboxes that can make a sandbox's port reachable by
// URL (runbox serve: its authenticated port route). A place without it
// (runbox mcp on stdio) has no URL to give.
type PortExposer interface {
	// ExposePort exposes port on sb's loopback and returns its URLs.
	ExposePort(ctx context.Context, sb runbox.Sandbox, port int) (ExposedPort, error)
}

// ExposedPort is port_expose's result.
type ExposedPort struct {
	Port      int    `json:"port"`
	URL       string `json:"url" jsonschema:"the route; needs the header Authorization: Bearer TOKEN (the token this MCP client uses)"`
	SignedURL string `json:"signed_url" jsonschema:"the route with a signature: opens in a browser without a token until expires"`
	Expires   string `json:"expires" jsonschema:"RFC 3339"`
}

// PortExposeInput is what port_expose takes.
type PortExposeInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id or name (default: this session's)"`
	Port    int    `json:"port" jsonschema:"a TCP port a server in the sandbox listens on, on its loopback (127.0.0.1)"`
}

// errNoPortURL is port_expose's answer where no URL can be handed out.
var errNoPortURL = fmt.Errorf("%w: port_expose needs runbox serve (MCP over HTTP at /mcp), which routes a URL to the port; "+
	"this MCP server runs on stdio and has no address of its own to give out: from a terminal, runbox port-forward SANDBOX PORT reaches the port", runbox.ErrUnsupported)

func (s *Server) addPortTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "port_expose",
		Title: "Open a sandbox port by URL",
		Description: `Make a server listening on a port of a sandbox's loopback (a dev server, a notebook, a WebSocket) reachable through an authenticated URL, and return it: url needs the client's bearer token, signed_url works in a browser until it expires.
Only ports asked for this way are reachable. Start the server first (exec with background).`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, IdempotentHint: true, OpenWorldHint: &hintOn},
	}, call(s, s.portExpose))
}

func (s *Server) portExpose(ctx context.Context, st *session, _ *mcp.CallToolRequest, in PortExposeInput) (*mcp.CallToolResult, ExposedPort, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, ExposedPort{}, fmt.Errorf("%w: port %d: want 1 to 65535", runbox.ErrInvalidSpec, in.Port)
	}
	pe, ok := s.place.(PortExposer)
	if !ok {
		return nil, ExposedPort{}, errNoPortURL
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, ExposedPort{}, err
	}
	out, err := pe.ExposePort(ctx, ref.sb, in.Port)
	if err != nil {
		return nil, ExposedPort{}, err
	}
	return textResult(fmt.Sprintf("port %d of sandbox %s: %s (with the bearer token)\nsigned, until %s: %s", in.Port, ref.sb.ID, out.URL, out.Expires, out.SignedURL)), out, nil
}

// checkAllow keeps a model's egress allowlist within the operator's
// (Limits.Allow): each name the model asks for must be one the operator's
// patterns cover ("*" covers every name, "*.example.com" the names under
// example.com, and itself the same pattern).
func (l Limits) checkAllow(asked []string) error {
	if len(asked) == 0 {
		return nil
	}
	if len(l.Allow) == 0 {
		return fmt.Errorf("%w: allow: this server lets a model open no name (its operator's --mcp-allow is empty)", ErrOverCeiling)
	}
	for _, a := range asked {
		if !allowCovers(l.Allow, a) {
			return fmt.Errorf("%w: allow %q: ask for names within %s", ErrOverCeiling, a, strings.Join(l.Allow, ", "))
		}
	}
	return nil
}

func allowCovers(ops []string, a string) bool {
	a = strings.ToLower(strings.TrimSuffix(a, "."))
	for _, o := range ops {
		o = strings.ToLower(strings.TrimSuffix(o, "."))
		switch {
		case o == "*", o == a:
			return true
		case strings.HasPrefix(o, "*."):
			base := o[1:] // ".example.com"
			if strings.HasSuffix(a, base) && (!strings.HasPrefix(a, "*.") || strings.HasSuffix(a[1:], base)) && a != base[1:] {
				return true
			}
		}
	}
	return false
}
