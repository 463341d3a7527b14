package mcpserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
)

// EgressSetter is a Sandboxes, or a provider, whose private-network
// sandboxes' egress policy can be read and changed at runtime (local,
// docker and kubernetes sandboxes; serve's SetEgress).
type EgressSetter interface {
	// Egress returns the policy in force in sb.
	Egress(ctx context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error)
	// SetEgress replaces sb's policy; new connections follow it.
	SetEgress(ctx context.Context, sb runbox.Sandbox, p runbox.EgressPolicy) error
}

// NetworkSetInput is what network_set takes.
type NetworkSetInput struct {
	Sandbox string   `json:"sandbox,omitempty" jsonschema:"the sandbox's id or name (default: this session's); it must be on network private"`
	Allow   []string `json:"allow" jsonschema:"every name the sandbox may reach through its proxy (pypi.org, *.github.com), within what the server allows; replaces the names allowed before ([] allows none)"`
}

// NetworkSetOutput is network_set's result.
type NetworkSetOutput struct {
	Sandbox string   `json:"sandbox"`
	Allow   []string `json:"allow" jsonschema:"the names the sandbox may reach now"`
	Deny    []string `json:"deny,omitempty" jsonschema:"names and address ranges refused whatever allow says (the operator's)"`
}

// errNoEgress is network_set's answer where the place cannot change a
// sandbox's policy.
var errNoEgress = fmt.Errorf("%w: this MCP server cannot change a sandbox's egress policy", runbox.ErrUnsupported)

func (s *Server) addNetworkTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "network_set",
		Title: "Set the names a private sandbox may reach",
		Description: `Replace the list of names a sandbox on network private may reach through its proxy (what sandbox_create's allow set): e.g. allow pypi.org and files.pythonhosted.org before pip install. Connections opened from then on follow it; open ones go on.
Only names within what the server allows are accepted. Not for a sandbox on another network.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOff, IdempotentHint: true, OpenWorldHint: &hintOn},
	}, call(s, s.networkSet))
}

// networkSet replaces the names a sandbox may reach. A model sets only
// the names (allow), each within the operator's Limits.Allow: the address
// ranges, pinned names and denials the sandbox has are the operator's and
// stay as they are, so a model can narrow what its sandbox reaches and
// widen it only as far as the operator let it.
func (s *Server) networkSet(ctx context.Context, st *session, _ *mcp.CallToolRequest, in NetworkSetInput) (*mcp.CallToolResult, NetworkSetOutput, error) {
	for _, a := range in.Allow {
		if strings.TrimSpace(a) == "" {
			return nil, NetworkSetOutput{}, fmt.Errorf("%w: allow: an empty name", runbox.ErrInvalidSpec)
		}
	}
	if err := s.cfg.Limits.checkAllow(in.Allow); err != nil {
		return nil, NetworkSetOutput{}, err
	}
	es, ok := s.place.(EgressSetter)
	if !ok {
		return nil, NetworkSetOutput{}, errNoEgress
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, NetworkSetOutput{}, err
	}
	pol, err := es.Egress(ctx, ref.sb)
	if err != nil {
		return nil, NetworkSetOutput{}, fmt.Errorf("egress policy of sandbox %s: %w", ref.sb.ID, err)
	}
	pol.Allow = slices.Clone(in.Allow)
	if err := egress.Policy(pol).Check(); err != nil {
		return nil, NetworkSetOutput{}, fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	if err := es.SetEgress(ctx, ref.sb, pol); err != nil {
		return nil, NetworkSetOutput{}, fmt.Errorf("set the egress policy of sandbox %s: %w", ref.sb.ID, err)
	}
	out := NetworkSetOutput{Sandbox: ref.sb.ID, Allow: pol.Allow, Deny: pol.Deny}
	if out.Allow == nil {
		out.Allow = []string{}
	}
	text := "nothing"
	if len(out.Allow) > 0 {
		text = strings.Join(out.Allow, ", ")
	}
	return textResult(fmt.Sprintf("sandbox %s may now reach %s through its proxy (new connections)", ref.sb.ID, text)), out, nil
}

var _ EgressSetter = (*Providers)(nil)

// Egress implements EgressSetter with the sandbox's provider.
func (p *Providers) Egress(ctx context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error) {
	ep, err := p.egressProvider(sb)
	if err != nil {
		return runbox.EgressPolicy{}, err
	}
	return ep.Egress(ctx, sb)
}

// SetEgress implements EgressSetter with the sandbox's provider.
func (p *Providers) SetEgress(ctx context.Context, sb runbox.Sandbox, pol runbox.EgressPolicy) error {
	ep, err := p.egressProvider(sb)
	if err != nil {
		return err
	}
	return ep.SetEgress(ctx, sb, pol)
}

// egressProvider is sb's provider where it can change a private
// sandbox's egress policy at runtime (local, docker, kubernetes).
func (p *Providers) egressProvider(sb runbox.Sandbox) (EgressSetter, error) {
	pr, err := p.provider(sb.Provider)
	if err != nil {
		return nil, err
	}
	ep, ok := pr.(EgressSetter)
	if !ok {
		return nil, fmt.Errorf("%w: the %s provider cannot change a sandbox's egress policy", runbox.ErrUnsupported, pr.Name())
	}
	return ep, nil
}
