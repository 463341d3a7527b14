package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/registry"
)

// MCPConfig is how the server serves MCP (streamable HTTP) at /mcp, behind
// the same bearer tokens as the API. Each tenant's MCP sessions see only
// the tenant's sandboxes; a session's sandboxes are created, removed and
// audited as SandboxService's are, and its execs and file calls take the
// API's own path (audit log, quotas, metrics). A sandbox a live session
// uses is in use for the reaper; a session's default sandbox is removed
// when the session ends or idles out, unless made with keep.
type MCPConfig struct {
	// Server is what the sessions do without being asked: their default
	// sandbox (Server.Provider "" is the server's default provider; an
	// empty Spec.Workdir gets a fresh workspace), exec timeouts, output
	// limits.
	Server mcpserver.Config
	// SessionIdle ends a session after that long without a request (zero:
	// mcpserver.DefaultSessionIdle).
	SessionIdle time.Duration
	// AnyHost turns off the MCP SDK's DNS-rebinding protection (a request
	// that arrived on a loopback address must name a loopback host). Only
	// for a reverse proxy on this machine that forwards the public host
	// name.
	AnyHost bool
}

// MCPLabel labels the sandboxes MCP sessions make ("made-by=mcp"), so that
// an operator can tell them apart.
const MCPLabel = "made-by"

// resolveMCP is the MCP handler's token resolver. authenticate has
// checked the same Authorization header already: the tenant is the
// request's.
func (s *Server) resolveMCP(ctx context.Context, _ string) (string, mcpserver.Sandboxes, error) {
	t, ok := TenantFromContext(ctx)
	if !ok {
		return "", nil, errors.New("the request was not authenticated")
	}
	return t.Name, s.mcpPlaceFor(t), nil
}

// mcpPlaceFor returns tenant t's view of the server, with t's latest
// record (quotas).
func (s *Server) mcpPlaceFor(t registry.Tenant) *mcpPlace {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.mcpPlaces[t.Name]
	if p == nil {
		p = &mcpPlace{s: s}
		s.mcpPlaces[t.Name] = p
	}
	p.tenant.Store(&t)
	return p
}

// CloseMCP ends every MCP session (their commands stopped with the stop
// protocol, their default sandboxes removed unless kept) and refuses new
// ones, returning when that is done or ctx ends. Serve calls it at
// shutdown, before streams are cut; Close calls it too.
func (s *Server) CloseMCP(ctx context.Context) error {
	if s.mcp == nil {
		return nil
	}
	return s.mcp.Close(ctx)
}

// mcpPlace is one tenant's view of the server, as MCP sessions use it
// (mcpserver.Sandboxes): the tenant's sandboxes only, made and removed the
// way SandboxService makes and removes them, and reached through the
// server's own exec and files API.
type mcpPlace struct {
	s      *Server
	tenant atomic.Pointer[registry.Tenant]
}

var (
	_ mcpserver.Sandboxes   = (*mcpPlace)(nil)
	_ mcpserver.Holder      = (*mcpPlace)(nil)
	_ mcpserver.PortExposer = (*mcpPlace)(nil)
	_ mcpserver.Brancher    = (*mcpPlace)(nil)
)

// SetPaused implements mcpserver.Brancher as PauseSandbox does for the
// tenant.
func (p *mcpPlace) SetPaused(ctx context.Context, sb runbox.Sandbox, pause bool) error {
	_, err := p.s.setPaused(ctx, p.tenantNow(), sb.ID, pause)
	return plainError(err)
}

// Snapshot implements mcpserver.Brancher as CreateSnapshot does for the
// tenant (its quota, its names).
func (p *mcpPlace) Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error) {
	row, err := p.s.createSnapshot(ctx, p.tenantNow(), sb.ID, name, opts.NoWorkspace)
	if err != nil {
		return runbox.Snapshot{}, plainError(err)
	}
	return runbox.Snapshot{Name: row.Name, Provider: row.Provider, Sandbox: row.Sandbox, Created: row.Created,
		Workspace: row.Workspace, Bytes: row.Bytes}, nil
}

// ExposePort implements mcpserver.PortExposer: as SandboxService.ExposePort
// for the tenant, with the server's --public-url (or the address of the
// MCP request) as the URLs' base.
func (p *mcpPlace) ExposePort(ctx context.Context, sb runbox.Sandbox, port int) (mcpserver.ExposedPort, error) {
	out, err := p.s.exposePort(ctx, p.tenantNow(), &runboxv1.ExposePortRequest{SandboxId: sb.ID, Port: uint32(port)})
	if err != nil {
		return mcpserver.ExposedPort{}, plainError(err)
	}
	return mcpserver.ExposedPort{Port: port, URL: out.Url, SignedURL: out.SignedUrl,
		Expires: time.UnixMilli(out.ExpiresAtUnixMs).UTC().Format(time.RFC3339)}, nil
}

// egressProto is the wire form of an egress policy (nil when empty).
func egressProto(e runbox.EgressPolicy) *runboxv1.EgressPolicy {
	if e.Empty() {
		return nil
	}
	return &runboxv1.EgressPolicy{Allow: e.Allow, AllowCidr: e.AllowCIDR, Deny: e.Deny, Resolve: e.Resolve}
}

func (p *mcpPlace) tenantNow() registry.Tenant { return *p.tenant.Load() }

// Create implements mcpserver.Sandboxes.
func (p *mcpPlace) Create(ctx context.Context, provider string, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	if spec.Rootfs != "" || spec.HostRoot || len(spec.DaemonArgs) > 0 {
		return runbox.Sandbox{}, fmt.Errorf("%w: rootfs, host root and daemon arguments cannot be set through runbox serve", runbox.ErrInvalidSpec)
	}
	rec, err := p.s.createSandbox(ctx, p.tenantNow(), &runboxv1.SandboxSpec{
		Provider: provider, Name: spec.Name, Image: spec.Image, Workdir: spec.Workdir,
		MemoryBytes: spec.Memory, Pids: spec.Pids, Cpus: spec.CPUs, DiskBytes: spec.Disk, Network: spec.Network,
		Labels: map[string]string{MCPLabel: "mcp"}, Egress: egressProto(spec.Egress), FromSnapshot: spec.FromSnapshot,
	})
	if err != nil {
		return runbox.Sandbox{}, plainError(err)
	}
	return sandboxOf(rec), nil
}

// Get implements mcpserver.Sandboxes: another tenant's sandbox is not
// found, exactly like one that never existed.
func (p *mcpPlace) Get(ctx context.Context, key string) (runbox.Sandbox, error) {
	rec, err := p.s.store.GetSandbox(ctx, p.tenantNow().Name, key)
	if errors.Is(err, registry.ErrNotFound) {
		return runbox.Sandbox{}, fmt.Errorf("%w: %q", runbox.ErrSandboxNotFound, key)
	}
	if err != nil {
		return runbox.Sandbox{}, err
	}
	return sandboxOf(rec), nil
}

// List implements mcpserver.Sandboxes.
func (p *mcpPlace) List(ctx context.Context) ([]runbox.Sandbox, error) {
	recs, err := p.s.store.ListSandboxes(ctx, p.tenantNow().Name)
	if err != nil {
		return nil, err
	}
	out := make([]runbox.Sandbox, 0, len(recs))
	for _, rec := range recs {
		out = append(out, sandboxOf(rec))
	}
	return out, nil
}

// Remove implements mcpserver.Sandboxes.
func (p *mcpPlace) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	return plainError(p.s.deleteSandbox(ctx, p.tenantNow(), sb.ID, force, "deleted by the tenant's MCP session"))
}

// Connect implements mcpserver.Sandboxes: a client of the server's own
// exec and files API, routed to sb as the tenant.
func (p *mcpPlace) Connect(_ context.Context, sb runbox.Sandbox) (*client.Client, error) {
	return client.New(p.s.self.dialer(selfCaller{place: p, sandbox: sb.ID}), client.WithSandboxName(sb.ID)), nil
}

// Hold implements mcpserver.Holder: sb counts as in use (never idle, so
// never reaped as idle) until release.
func (p *mcpPlace) Hold(sb runbox.Sandbox) (release func()) {
	r, ok := p.s.acquire(sb.ID)
	if !ok {
		return func() {} // being removed
	}
	return sync.OnceFunc(r)
}

// sandboxOf is rec as runbox.Sandbox. A lost sandbox whose spec asks to
// be recreated counts as alive: the next call recreates it.
func sandboxOf(rec registry.Sandbox) runbox.Sandbox {
	var spec runboxv1.SandboxSpec
	_ = protojson.Unmarshal([]byte(rec.Spec), &spec)
	detail := map[string]string{"state": "ready", "provider_id": rec.ProviderID}
	alive := rec.State != registry.StateLost
	if !alive {
		detail["state"], detail["lost"] = "lost", rec.LostReason
		alive = spec.Recreate
	}
	return runbox.Sandbox{ID: rec.ID, Name: rec.Name, Provider: rec.Provider, Created: rec.Created, Alive: alive, Detail: detail}
}

// plainError is an API error as a Go error, for MCP's tool results: its
// message without the code prefix, still matching runbox's sentinels.
func plainError(err error) error {
	if ce, ok := errors.AsType[*connect.Error](err); ok && ce.Unwrap() != nil {
		return ce.Unwrap()
	}
	return err
}
