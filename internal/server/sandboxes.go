package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/safepath"
)

// sandboxService implements runboxv1connect.SandboxServiceHandler.
type sandboxService struct{ s *Server }

// createTimeout bounds a provider's Create, which goes on if the caller
// leaves (a half-made sandbox would otherwise be left unregistered).
const createTimeout = 5 * time.Minute

func newSandboxID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "sb-" + hex.EncodeToString(b)
}

func (h *sandboxService) Create(ctx context.Context, req *connect.Request[runboxv1.CreateSandboxRequest]) (*connect.Response[runboxv1.CreateSandboxResponse], error) {
	rec, err := h.s.createSandbox(ctx, tenantOf(ctx), req.Msg.GetSpec())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.CreateSandboxResponse{Sandbox: h.s.sandboxProto(rec)}), nil
}

// createSandbox makes a sandbox for tenant: the spec checked, the tenant's
// quota kept, the sandbox recorded in the registry and its creation
// audited. Errors are the API's (connect errors with runbox's tags).
// SandboxService.Create and MCP sessions both create through it.
func (s *Server) createSandbox(ctx context.Context, tenant registry.Tenant, spec *runboxv1.SandboxSpec) (registry.Sandbox, error) {
	if spec == nil {
		spec = &runboxv1.SandboxSpec{}
	}
	spec = cloneSpec(spec)
	if spec.FromSnapshot != "" {
		if _, err := s.resolveSnapshot(ctx, tenant.Name, spec); err != nil {
			return registry.Sandbox{}, err
		}
	}
	if spec.Provider == "" {
		spec.Provider = s.cfg.DefaultProvider
	}
	if err := s.checkSandboxSpec(spec); err != nil {
		return registry.Sandbox{}, err
	}
	if spec.Name != "" {
		if taken, err := s.store.NameTaken(ctx, tenant.Name, spec.Name); err != nil {
			return registry.Sandbox{}, apiError(err)
		} else if taken {
			return registry.Sandbox{}, apiError(fmt.Errorf("spec.name: tenant %s already has a sandbox named %q: %w", tenant.Name, spec.Name, runbox.ErrNameInUse))
		}
	}
	admitted, err := s.admitCreate(ctx, tenant)
	if err != nil {
		return registry.Sandbox{}, err
	}
	defer admitted.done()

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	id := newSandboxID()
	sb, workspace, err := s.provision(cctx, tenant.Name, id, spec)
	if err != nil {
		return registry.Sandbox{}, err
	}
	specJSON, _ := protojson.Marshal(spec)
	now := s.now()
	rec := registry.Sandbox{
		ID: id, Tenant: tenant.Name, Name: spec.Name, Provider: spec.Provider, ProviderID: sb.ID,
		Spec: string(specJSON), Labels: spec.Labels, Workspace: workspace, State: registry.StateReady,
		Created: now, LastUsed: now,
	}
	if err := admitted.insert(cctx, rec); err != nil {
		if uerr := s.unprovision(cctx, spec.Provider, sb, workspace); uerr != nil {
			s.log.Error("undo create", "sandbox", id, "err", uerr)
		}
		if errors.Is(err, registry.ErrNameTaken) {
			return registry.Sandbox{}, apiError(fmt.Errorf("spec.name: %w", err))
		}
		return registry.Sandbox{}, apiError(err)
	}
	if err := s.store.Lifecycle(cctx, tenant.Name, id, registry.KindCreate, spec.Provider+" "+sb.ID); err != nil {
		s.log.Error("audit", "err", err)
	}
	s.log.Info("sandbox created", "sandbox", id, "tenant", tenant.Name, "provider", spec.Provider, "provider_id", sb.ID)
	return rec, nil
}

// admission is one create let in under its tenant's max_sandboxes: it
// counts in creating until insert puts the sandbox in the registry or
// done gives its place back.
type admission struct {
	s      *Server
	tenant string
	held   bool
}

// admitCreate lets a create of tenant in when the tenant's sandboxes, made
// and being made, are below its max_sandboxes; over it, the quota error.
// The count is exact: taken and checked under admitMu, which an insert
// holds too, so a sandbox is never counted twice (made and still being
// made) nor missed (made after the count, before the check).
func (s *Server) admitCreate(ctx context.Context, tenant registry.Tenant) (*admission, error) {
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	have, err := s.store.CountSandboxes(ctx, tenant.Name)
	if err != nil {
		return nil, apiError(err)
	}
	n := have + s.creating[tenant.Name]
	if max := s.quotas(tenant).MaxSandboxes; max > 0 && n >= max {
		return nil, quota(tenant.Name, "max_sandboxes", n, max)
	}
	s.creating[tenant.Name]++
	return &admission{s: s, tenant: tenant.Name, held: true}, nil
}

// insert records rec in the registry and, when it is in, stops counting
// it as being created, in one step under admitMu.
func (a *admission) insert(ctx context.Context, rec registry.Sandbox) error {
	a.s.admitMu.Lock()
	defer a.s.admitMu.Unlock()
	if err := a.s.store.InsertSandbox(ctx, rec); err != nil {
		return err
	}
	a.releaseLocked()
	return nil
}

// done gives the admission's place back if insert did not.
func (a *admission) done() {
	a.s.admitMu.Lock()
	defer a.s.admitMu.Unlock()
	a.releaseLocked()
}

func (a *admission) releaseLocked() {
	if a.held {
		a.s.creating[a.tenant]--
		a.held = false
	}
}

// hostDirectoryProvider is a provider whose sandboxes run in a directory
// of this machine (host, local). A sandbox of another provider (docker,
// ssh, kubernetes) starts in its image's or its remote's own directory, so
// a workspace made here would mean nothing to it.
type hostDirectoryProvider interface{ RunsInHostDirectory() bool }

// provision makes a provider sandbox for spec, with a fresh workspace when
// the spec names no workdir and the provider runs in a directory of this
// machine (never the server's own directory). From one of tenant's
// snapshots that holds a workspace, the provider makes the workspace: a
// copy of the snapshot's, removed with the sandbox.
func (s *Server) provision(ctx context.Context, tenant, id string, spec *runboxv1.SandboxSpec) (runbox.Sandbox, string, error) {
	p := s.cfg.Providers[spec.Provider]
	rs := runbox.SandboxSpec{
		Image: spec.Image, Workdir: spec.Workdir, Memory: spec.MemoryBytes, Pids: spec.Pids,
		CPUs: spec.Cpus, Disk: spec.DiskBytes, Network: spec.Network, Egress: egressPolicy(spec.GetEgress()),
	}
	snapWorkspace := false
	if spec.FromSnapshot != "" {
		row, err := s.resolveSnapshot(ctx, tenant, spec)
		if err != nil {
			return runbox.Sandbox{}, "", err
		}
		rs.FromSnapshot, snapWorkspace = row.ProviderName, row.Workspace
	}
	workspace := ""
	var held *os.File // the workdir as opened, compared after the create
	if rs.Workdir != "" {
		f, err := s.openWorkdir(rs.Workdir)
		if err != nil {
			return runbox.Sandbox{}, "", err
		}
		defer f.Close()
		held = f
	}
	if hd, ok := p.(hostDirectoryProvider); ok && hd.RunsInHostDirectory() && rs.Workdir == "" && !snapWorkspace {
		workspace = filepath.Join(s.cfg.WorkspaceDir, id)
		f, err := safepath.MkdirBeneath(s.cfg.WorkspaceDir, id, 0o700)
		if err != nil {
			return runbox.Sandbox{}, "", apiError(fmt.Errorf("make workspace of %s: %w", id, err))
		}
		defer f.Close()
		held = f
		rs.Workdir = workspace
	}
	sb, err := p.Create(ctx, rs)
	if err == nil && held != nil {
		// The path was checked before the provider used it: make sure the
		// directory it names now is still the one that was checked (no
		// link was swapped in between).
		if err = sameDir(held, s.cfg.WorkspaceDir, s.cfg.WorkdirRoots, rs.Workdir); err != nil {
			if rerr := p.Remove(ctx, sb, true); rerr != nil {
				s.log.Error("remove sandbox whose workdir moved", "provider_id", sb.ID, "err", rerr)
			}
		}
	}
	if err != nil {
		s.removeWorkspace(workspace)
		if ce := new(connect.Error); errors.As(err, &ce) {
			return runbox.Sandbox{}, "", err
		}
		if errors.Is(err, runbox.ErrProviderUnavailable) {
			return runbox.Sandbox{}, "", connect.NewError(connect.CodeFailedPrecondition, err)
		}
		return runbox.Sandbox{}, "", apiError(fmt.Errorf("create %s sandbox: %w", spec.Provider, err))
	}
	if snapWorkspace && rs.Workdir == "" {
		workspace = sb.Detail["workdir"] // the provider's copy of the snapshot's
	}
	return sb, workspace, nil
}

// unprovision removes a provider sandbox and its workspace.
func (s *Server) unprovision(ctx context.Context, provider string, sb runbox.Sandbox, workspace string) error {
	var err error
	if p, ok := s.cfg.Providers[provider]; ok && sb.ID != "" {
		err = p.Remove(ctx, sb, true)
		if errors.Is(err, runbox.ErrSandboxNotFound) {
			err = nil
		}
	}
	s.removeWorkspace(workspace)
	return err
}

func (h *sandboxService) Get(ctx context.Context, req *connect.Request[runboxv1.GetSandboxRequest]) (*connect.Response[runboxv1.GetSandboxResponse], error) {
	key := req.Msg.GetId()
	if key == "" {
		return nil, invalid("id", "empty: give a sandbox's id or name")
	}
	rec, err := h.s.store.GetSandbox(ctx, tenantOf(ctx).Name, key)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, notFound(key)
	}
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&runboxv1.GetSandboxResponse{Sandbox: h.s.sandboxProto(rec)}), nil
}

func (h *sandboxService) List(ctx context.Context, req *connect.Request[runboxv1.ListSandboxesRequest]) (*connect.Response[runboxv1.ListSandboxesResponse], error) {
	recs, err := h.s.store.ListSandboxes(ctx, tenantOf(ctx).Name)
	if err != nil {
		return nil, apiError(err)
	}
	out := &runboxv1.ListSandboxesResponse{Sandboxes: []*runboxv1.Sandbox{}}
	for _, rec := range recs {
		if hasLabels(rec.Labels, req.Msg.GetLabels()) {
			out.Sandboxes = append(out.Sandboxes, h.s.sandboxProto(rec))
		}
	}
	return connect.NewResponse(out), nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (h *sandboxService) Delete(ctx context.Context, req *connect.Request[runboxv1.DeleteSandboxRequest]) (*connect.Response[runboxv1.DeleteSandboxResponse], error) {
	if err := h.s.deleteSandbox(ctx, tenantOf(ctx), req.Msg.GetId(), req.Msg.GetForce(), "deleted by the tenant"); err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.DeleteSandboxResponse{}), nil
}

// deleteSandbox removes tenant's sandbox key (id or name) at the tenant's
// request, audited with detail; a lost sandbox needs force. Errors are the
// API's. SandboxService.Delete and MCP sessions both delete through it.
func (s *Server) deleteSandbox(ctx context.Context, tenant registry.Tenant, key string, force bool, detail string) error {
	if key == "" {
		return invalid("id", "empty: give a sandbox's id or name")
	}
	rec, err := s.store.GetSandbox(ctx, tenant.Name, key)
	if errors.Is(err, registry.ErrNotFound) {
		return notFound(key)
	}
	if err != nil {
		return apiError(err)
	}
	if rec.State == registry.StateLost && !force {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
			"sandbox %s is lost (%s): processes it started may have outlived it; delete it with force", rec.ID, rec.LostReason))
	}
	return s.removeSandbox(context.WithoutCancel(ctx), rec, force, registry.KindDelete, detail, false)
}

// removeSandbox removes a sandbox with the stop protocol and forgets it.
// With onlyIdle (the reaper), it gives up if the sandbox is in use.
func (s *Server) removeSandbox(ctx context.Context, rec registry.Sandbox, force bool, kind, detail string, onlyIdle bool) error {
	if !s.beginRemove(rec.ID, onlyIdle) {
		return connect.NewError(connect.CodeAborted, fmt.Errorf("sandbox %s is in use", rec.ID))
	}
	defer s.endRemove(rec.ID)
	s.dropUpstream(rec.ID)
	if p, ok := s.cfg.Providers[rec.Provider]; ok {
		sb, err := p.Get(ctx, rec.ProviderID)
		if err == nil {
			if taker, ok := p.(egressRefusalTaker); ok {
				// Its last refusals, before its state directory goes.
				s.recordRefusals(ctx, rec, taker, sb)
			}
			err = p.Remove(ctx, sb, force || rec.State == registry.StateLost)
		}
		if err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			return apiError(fmt.Errorf("remove sandbox %s: %w", rec.ID, err))
		}
	}
	s.removeWorkspace(rec.Workspace)
	if err := s.store.DeleteSandbox(ctx, rec.Tenant, rec.ID, kind, detail); err != nil {
		return apiError(err)
	}
	s.execsLost(rec.ID, "sandbox removed")
	s.log.Info("sandbox removed", "sandbox", rec.ID, "tenant", rec.Tenant, "why", kind, "detail", detail)
	return nil
}

// recreateOrFail replaces r's lost sandbox with a fresh one of the same
// spec when the spec asks for it (r.recreated is then set), else returns
// the lost error.
func (s *Server) recreateOrFail(ctx context.Context, r *routed) error {
	var spec runboxv1.SandboxSpec
	if err := protojson.Unmarshal([]byte(r.rec.Spec), &spec); err != nil {
		return apiError(fmt.Errorf("sandbox %s spec: %w", r.rec.ID, err))
	}
	if !spec.Recreate {
		return lostError(r.rec.ID, r.rec.LostReason)
	}
	s.recreateMu.Lock()
	defer s.recreateMu.Unlock()
	cur, err := s.store.GetSandbox(ctx, r.rec.Tenant, r.rec.ID)
	if err != nil {
		return notFound(r.rec.ID)
	}
	if cur.State != registry.StateLost { // another call recreated it
		up, err := s.upstreamFor(ctx, cur)
		if err != nil || up == nil {
			return lostError(cur.ID, "recreated, but not answering")
		}
		r.rec, r.up, r.recreated = cur, up, true
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	if p, ok := s.cfg.Providers[cur.Provider]; ok { // the remains of the old one
		if old, err := p.Get(cctx, cur.ProviderID); err == nil {
			s.removeProviderSandbox(cctx, p, old)
		}
	}
	s.removeWorkspace(cur.Workspace)
	sb, _, err := s.provision(cctx, cur.Tenant, cur.ID, &spec)
	if err != nil {
		return err
	}
	if err := s.store.Recreated(cctx, cur.ID, sb.ID); err != nil {
		return apiError(err)
	}
	detail := fmt.Sprintf("lost (%s); replaced by %s sandbox %s", cur.LostReason, cur.Provider, sb.ID)
	if err := s.store.Lifecycle(cctx, cur.Tenant, cur.ID, registry.KindRecreate, detail); err != nil {
		s.log.Error("audit", "err", err)
	}
	s.log.Warn("sandbox recreated", "sandbox", cur.ID, "tenant", cur.Tenant, "detail", detail)
	cur, err = s.store.GetSandbox(cctx, cur.Tenant, cur.ID)
	if err != nil {
		return apiError(err)
	}
	up, err := s.upstreamFor(cctx, cur)
	if err != nil {
		return err
	}
	if up == nil {
		return lostError(cur.ID, "recreated, but its runboxd does not answer")
	}
	r.rec, r.up, r.recreated = cur, up, true
	return nil
}

// sandboxProto is rec as the API returns it.
func (s *Server) sandboxProto(rec registry.Sandbox) *runboxv1.Sandbox {
	var spec runboxv1.SandboxSpec
	_ = protojson.Unmarshal([]byte(rec.Spec), &spec)
	state := runboxv1.SandboxState_SANDBOX_STATE_READY
	if rec.State == registry.StateLost {
		state = runboxv1.SandboxState_SANDBOX_STATE_LOST
	}
	lastUsed := rec.LastUsed
	s.mu.Lock()
	if u := s.usage[rec.ID]; u != nil && u.lastUsed.After(lastUsed) {
		lastUsed = u.lastUsed
	}
	running := s.runningIn(rec.ID)
	s.mu.Unlock()
	var exposed []uint32
	if ports, err := s.store.ExposedPorts(s.bg, rec.ID); err == nil {
		for _, p := range ports {
			exposed = append(exposed, uint32(p))
		}
	}
	return &runboxv1.Sandbox{ExposedPorts: exposed,
		Id: rec.ID, Name: rec.Name, Provider: rec.Provider, Spec: &spec, State: state,
		LostReason: rec.LostReason, CreatedAtUnixMs: rec.Created.UnixMilli(), LastUsedAtUnixMs: lastUsed.UnixMilli(),
		Recreated: int32(rec.Recreated), RunningExecs: int32(running), ProviderId: rec.ProviderID,
		Paused: rec.Paused,
	}
}

// quotas returns tenant's quotas: its own where set, else the server's.
func (s *Server) quotas(t registry.Tenant) Quotas {
	q := s.cfg.Quotas
	if t.MaxSandboxes > 0 {
		q.MaxSandboxes = t.MaxSandboxes
	}
	if t.MaxExecs > 0 {
		q.MaxExecs = t.MaxExecs
	}
	return q
}
