package mcpserver

import (
	"context"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Remote is Sandboxes through a runbox serve: the sandboxes of the
// server client's tenant. Sandboxes are made, found and removed with the
// server's SandboxService, and every exec and file call goes through the
// server (audited and counted there like any API call).
type Remote struct {
	// Server is the client of the runbox serve, with the tenant's token.
	Server *client.Server
	// Options are added to every sandbox Create makes (labels, idle TTL,
	// ...); Create's provider argument overrides Options.Provider unless
	// empty.
	Options client.SandboxOptions
}

// Create implements Sandboxes.
func (r *Remote) Create(ctx context.Context, provider string, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	o := r.Options
	if provider != "" {
		o.Provider = provider
	}
	return r.Server.CreateSandbox(ctx, spec, o)
}

// Get implements Sandboxes.
func (r *Remote) Get(ctx context.Context, key string) (runbox.Sandbox, error) {
	return r.Server.Get(ctx, key)
}

// List implements Sandboxes.
func (r *Remote) List(ctx context.Context) ([]runbox.Sandbox, error) { return r.Server.List(ctx) }

// Remove implements Sandboxes.
func (r *Remote) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	return r.Server.Remove(ctx, sb, force)
}

// Connect implements Sandboxes: a client whose calls go through the
// server to the sandbox.
func (r *Remote) Connect(_ context.Context, sb runbox.Sandbox) (*client.Client, error) {
	return r.Server.Sandbox(sb.ID), nil
}
