package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Sandboxes is a place that holds sandboxes: this machine's providers (for
// runbox mcp on stdio), or one tenant's view of a control plane (for
// runbox serve's /mcp). The MCP server does everything through it, so it
// never sees more than the caller may.
type Sandboxes interface {
	// Create makes a sandbox with the named provider ("" for the place's
	// default) and returns once its runboxd answers.
	Create(ctx context.Context, provider string, spec runbox.SandboxSpec) (runbox.Sandbox, error)
	// Get finds a sandbox by id, id prefix or name; an error wrapping
	// runbox.ErrSandboxNotFound when there is none.
	Get(ctx context.Context, key string) (runbox.Sandbox, error)
	// List returns every sandbox the place holds.
	List(ctx context.Context) ([]runbox.Sandbox, error)
	// Remove stops every exec in the sandbox (stop protocol) and destroys
	// it; force also removes a sandbox whose runboxd is gone.
	Remove(ctx context.Context, sb runbox.Sandbox, force bool) error
	// Connect returns a client for the sandbox's runboxd. The caller closes
	// it.
	Connect(ctx context.Context, sb runbox.Sandbox) (*client.Client, error)
}

// Holder is a Sandboxes that tracks which of its sandboxes are in use
// (runbox serve: its reaper never removes a sandbox in use as idle). Hold
// marks sb in use by a live MCP session until release is called; a session
// holds every sandbox it uses until it ends or forgets the sandbox.
type Holder interface {
	Hold(sb runbox.Sandbox) (release func())
}

// Providers is Sandboxes over this machine's providers, looked through in
// order (as the CLI does). A provider that cannot work here (no Docker
// engine) is passed over by Get and List.
type Providers struct {
	// List holds the providers, in lookup order.
	Providers []runbox.Provider
	// Default names the provider Create uses when given none.
	Default string
}

// provider returns the provider called name.
func (p *Providers) provider(name string) (runbox.Provider, error) {
	if name == "" {
		name = p.Default
	}
	names := make([]string, 0, len(p.Providers))
	for _, pr := range p.Providers {
		if pr.Name() == name {
			return pr, nil
		}
		names = append(names, pr.Name())
	}
	slices.Sort(names)
	return nil, fmt.Errorf("%w: unknown provider %q (available: %s)", runbox.ErrInvalidSpec, name, strings.Join(names, ", "))
}

// Create implements Sandboxes.
func (p *Providers) Create(ctx context.Context, provider string, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	pr, err := p.provider(provider)
	if err != nil {
		return runbox.Sandbox{}, err
	}
	return pr.Create(ctx, spec)
}

// Get implements Sandboxes.
func (p *Providers) Get(ctx context.Context, key string) (runbox.Sandbox, error) {
	var unavailable []string
	for _, pr := range p.Providers {
		sb, err := pr.Get(ctx, key)
		switch {
		case err == nil:
			return sb, nil
		case errors.Is(err, runbox.ErrProviderUnavailable):
			unavailable = append(unavailable, pr.Name())
		case !errors.Is(err, runbox.ErrSandboxNotFound):
			return runbox.Sandbox{}, err
		case !isPlainNotFound(err):
			// A prefix matching several sandboxes: a reason worth keeping.
			return runbox.Sandbox{}, err
		}
	}
	if len(unavailable) > 0 {
		return runbox.Sandbox{}, fmt.Errorf("%w: %q (not searched: %s, unavailable here)",
			runbox.ErrSandboxNotFound, key, strings.Join(unavailable, ", "))
	}
	return runbox.Sandbox{}, fmt.Errorf("%w: %q", runbox.ErrSandboxNotFound, key)
}

// isPlainNotFound reports whether err says no more than ErrSandboxNotFound.
func isPlainNotFound(err error) bool {
	if re, ok := errors.AsType[*runbox.Error](err); ok {
		err = re.Err
	}
	return err == runbox.ErrSandboxNotFound
}

// List implements Sandboxes.
func (p *Providers) List(ctx context.Context) ([]runbox.Sandbox, error) {
	var all []runbox.Sandbox
	for _, pr := range p.Providers {
		sbs, err := pr.List(ctx)
		if errors.Is(err, runbox.ErrProviderUnavailable) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s sandboxes: %w", pr.Name(), err)
		}
		all = append(all, sbs...)
	}
	return all, nil
}

// Remove implements Sandboxes.
func (p *Providers) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	pr, err := p.provider(sb.Provider)
	if err != nil {
		return err
	}
	return pr.Remove(ctx, sb, force)
}

// Connect implements Sandboxes.
func (p *Providers) Connect(ctx context.Context, sb runbox.Sandbox) (*client.Client, error) {
	pr, err := p.provider(sb.Provider)
	if err != nil {
		return nil, err
	}
	return client.New(pr.Dialer(sb), client.WithSandboxName(sb.ID)), nil
}
