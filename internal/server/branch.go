package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/branching"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// maxForks bounds one ForkSandbox's count.
const maxForks = 50

// snapshotTimeout bounds a provider's snapshot, which goes on if the
// caller leaves (a snapshot taken but not recorded would be lost to its
// tenant and never removed).
const snapshotTimeout = 10 * time.Minute

func (h *sandboxService) PauseSandbox(ctx context.Context, req *connect.Request[runboxv1.PauseSandboxRequest]) (*connect.Response[runboxv1.PauseSandboxResponse], error) {
	rec, err := h.s.setPaused(ctx, tenantOf(ctx), req.Msg.GetSandboxId(), true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.PauseSandboxResponse{Sandbox: h.s.sandboxProto(rec)}), nil
}

func (h *sandboxService) ResumeSandbox(ctx context.Context, req *connect.Request[runboxv1.ResumeSandboxRequest]) (*connect.Response[runboxv1.ResumeSandboxResponse], error) {
	rec, err := h.s.setPaused(ctx, tenantOf(ctx), req.Msg.GetSandboxId(), false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.ResumeSandboxResponse{Sandbox: h.s.sandboxProto(rec)}), nil
}

func (h *sandboxService) CreateSnapshot(ctx context.Context, req *connect.Request[runboxv1.CreateSnapshotRequest]) (*connect.Response[runboxv1.CreateSnapshotResponse], error) {
	sn, err := h.s.createSnapshot(ctx, tenantOf(ctx), req.Msg.GetSandboxId(), req.Msg.GetName(), req.Msg.GetNoWorkspace())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.CreateSnapshotResponse{Snapshot: snapshotProto(sn)}), nil
}

func (h *sandboxService) ListSnapshots(ctx context.Context, _ *connect.Request[runboxv1.ListSnapshotsRequest]) (*connect.Response[runboxv1.ListSnapshotsResponse], error) {
	sns, err := h.s.store.ListSnapshots(ctx, tenantOf(ctx).Name)
	if err != nil {
		return nil, apiError(err)
	}
	out := &runboxv1.ListSnapshotsResponse{Snapshots: []*runboxv1.Snapshot{}}
	for _, sn := range sns {
		out.Snapshots = append(out.Snapshots, snapshotProto(sn))
	}
	return connect.NewResponse(out), nil
}

func (h *sandboxService) DeleteSnapshot(ctx context.Context, req *connect.Request[runboxv1.DeleteSnapshotRequest]) (*connect.Response[runboxv1.DeleteSnapshotResponse], error) {
	if err := h.s.deleteSnapshot(ctx, tenantOf(ctx), req.Msg.GetName()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.DeleteSnapshotResponse{}), nil
}

func (h *sandboxService) ForkSandbox(ctx context.Context, req *connect.Request[runboxv1.ForkSandboxRequest]) (*connect.Response[runboxv1.ForkSandboxResponse], error) {
	sn, recs, err := h.s.forkSandbox(ctx, tenantOf(ctx), req.Msg.GetSandboxId(), int(req.Msg.GetCount()), req.Msg.GetNoWorkspace())
	if err != nil {
		return nil, err
	}
	out := &runboxv1.ForkSandboxResponse{Snapshot: snapshotProto(sn), Sandboxes: []*runboxv1.Sandbox{}}
	for _, rec := range recs {
		out.Sandboxes = append(out.Sandboxes, h.s.sandboxProto(rec))
	}
	return connect.NewResponse(out), nil
}

// snapshotProto is sn as the API returns it (never the provider's name).
func snapshotProto(sn registry.Snapshot) *runboxv1.Snapshot {
	return &runboxv1.Snapshot{
		Name: sn.Name, Provider: sn.Provider, SandboxId: sn.Sandbox, CreatedAtUnixMs: sn.Created.UnixMilli(),
		Workspace: sn.Workspace, Bytes: sn.Bytes,
	}
}

// held is a tenant's sandbox found for a pause or a snapshot: its record,
// its provider and the provider's description of it, counted as in use
// until release.
type held struct {
	rec     registry.Sandbox
	p       runbox.Provider
	sb      runbox.Sandbox
	release func()
}

// hold finds tenant's sandbox key (id or name) and its provider sandbox.
// Another tenant's sandbox is NotFound, a lost one ErrSandboxLost.
func (s *Server) hold(ctx context.Context, tenant registry.Tenant, key string) (*held, error) {
	return s.holdFor(ctx, tenant, key, true)
}

// holdFor is hold; without use, holding the sandbox is not a use of it
// (see acquireFor).
func (s *Server) holdFor(ctx context.Context, tenant registry.Tenant, key string, use bool) (*held, error) {
	if key == "" {
		return nil, invalid("sandbox_id", "empty: give a sandbox's id or name")
	}
	rec, err := s.store.GetSandbox(ctx, tenant.Name, key)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, notFound(key)
	}
	if err != nil {
		return nil, apiError(err)
	}
	if rec.State == registry.StateLost {
		return nil, lostError(rec.ID, rec.LostReason)
	}
	p, ok := s.cfg.Providers[rec.Provider]
	if !ok {
		return nil, apiError(fmt.Errorf("%w: sandbox %s: provider %q is not enabled on this server", runbox.ErrProviderUnavailable, rec.ID, rec.Provider))
	}
	release, ok := s.acquireFor(rec.ID, use)
	if !ok {
		return nil, notFound(key)
	}
	sb, err := p.Get(ctx, rec.ProviderID)
	if err != nil {
		release()
		if errors.Is(err, runbox.ErrSandboxNotFound) {
			return nil, s.checkLostOr(rec, err)
		}
		return nil, apiError(fmt.Errorf("look up sandbox %s: %w", rec.ID, err))
	}
	return &held{rec: rec, p: p, sb: sb, release: release}, nil
}

// checkLostOr is the lost error when rec is found lost, else err as the
// API's.
func (s *Server) checkLostOr(rec registry.Sandbox, err error) error {
	if lost := s.checkLost(rec); lost != nil {
		return lost
	}
	return apiError(fmt.Errorf("sandbox %s: %w", rec.ID, err))
}

// upstreamDaemon is the server's connection to a sandbox's runboxd as a
// branching.Daemon; err, when set, is why there is none.
type upstreamDaemon struct {
	up  *upstream
	err error
}

func (d upstreamDaemon) Pause(ctx context.Context) error {
	if d.err != nil {
		return d.err
	}
	_, err := d.up.rpc.Pause(ctx, connect.NewRequest(&runboxv1.PauseRequest{}))
	return relayed(err)
}

func (d upstreamDaemon) Resume(ctx context.Context) error {
	if d.err != nil {
		return d.err
	}
	_, err := d.up.rpc.Resume(ctx, connect.NewRequest(&runboxv1.ResumeRequest{}))
	return relayed(err)
}

// relayed is relay for a non-nil error.
func relayed(err error) error {
	if err == nil {
		return nil
	}
	return relay(err)
}

// pause pauses (or resumes) h's sandbox as the CLI does
// (branching.SetPaused) and records it.
func (s *Server) pause(ctx context.Context, h *held, pause bool) error {
	err := branching.SetPaused(ctx, h.p, h.sb, pause, func() (branching.Daemon, func()) {
		up, err := s.upstreamFor(ctx, h.rec)
		if err == nil && up == nil {
			err = lostError(h.rec.ID, "its runboxd does not answer")
		}
		return upstreamDaemon{up: up, err: err}, func() {}
	})
	if err != nil {
		return branchError(err)
	}
	// The idle clock stops while paused: the pause time is kept (a second
	// pause keeps the first's), and the resume moves the last use forward
	// by the time paused.
	now := s.now()
	if pause {
		if err := s.store.Pause(context.WithoutCancel(ctx), h.rec.ID, now); err != nil {
			return apiError(err)
		}
		if !h.rec.Paused {
			h.rec.PausedAt = now
		}
	} else if h.rec.Paused {
		last := s.resumeIdleClock(h.rec, now)
		if err := s.store.Resume(context.WithoutCancel(ctx), h.rec.ID, last); err != nil {
			return apiError(err)
		}
		h.rec.LastUsed, h.rec.PausedAt = last, time.Time{}
	}
	h.rec.Paused = pause
	return nil
}

// branchError is err, from a provider or from runboxd, as the API's.
func branchError(err error) error {
	if _, ok := errors.AsType[*connect.Error](err); ok {
		return err
	}
	return apiError(err)
}

// setPaused pauses (or resumes) tenant's sandbox key, audited. Errors are
// the API's. PauseSandbox, RunboxService.Pause through the server and MCP
// all pause through it.
func (s *Server) setPaused(ctx context.Context, tenant registry.Tenant, key string, pause bool) (registry.Sandbox, error) {
	h, err := s.holdFor(ctx, tenant, key, false)
	if err != nil {
		return registry.Sandbox{}, err
	}
	defer h.release()
	if err := s.pause(ctx, h, pause); err != nil {
		return registry.Sandbox{}, err
	}
	kind := registry.KindResume
	if pause {
		kind = registry.KindPause
	}
	if err := s.store.Lifecycle(context.WithoutCancel(ctx), tenant.Name, h.rec.ID, kind, ""); err != nil {
		s.log.Error("audit", "err", err)
	}
	return h.rec, nil
}

// pausedByProvider reports whether rec is paused by a provider that
// freezes its runboxd too (docker): no call reaches it until resumed.
func (s *Server) pausedByProvider(rec registry.Sandbox) bool {
	if !rec.Paused {
		return false
	}
	_, ok := s.cfg.Providers[rec.Provider].(runbox.Pauser)
	return ok
}

// pausedError is the answer for a call to a sandbox its provider paused.
func pausedError(id string) error {
	return apiError(fmt.Errorf("%w: sandbox %s: resume it first", runbox.ErrSandboxPaused, id))
}

// createSnapshot snapshots tenant's sandbox key as the tenant's snapshot
// name (generated when empty), under the provider name the server makes
// (random, never the tenant's: no tenant can name or guess another's),
// within the tenant's max_snapshots. Errors are the API's.
func (s *Server) createSnapshot(ctx context.Context, tenant registry.Tenant, key, name string, noWorkspace bool) (registry.Snapshot, error) {
	if name == "" {
		name = "snap-" + randomHex(4)
	}
	if !sandboxkey.ValidName(name) {
		return registry.Snapshot{}, invalid("name", "%q: use letters, digits, '_', '.', '-' (at most 63, not starting with a punctuation mark)", name)
	}
	if _, err := s.store.GetSnapshot(ctx, tenant.Name, name); err == nil {
		return registry.Snapshot{}, apiError(fmt.Errorf("snapshot name %q: tenant %s already has one: %w", name, tenant.Name, runbox.ErrNameInUse))
	}
	h, err := s.hold(ctx, tenant, key)
	if err != nil {
		return registry.Snapshot{}, err
	}
	defer h.release()
	sn, err := branching.SnapshotterOf(h.p)
	if err != nil {
		return registry.Snapshot{}, apiError(err)
	}
	if err := s.admitSnapshot(ctx, tenant); err != nil {
		return registry.Snapshot{}, err
	}
	defer s.snapshotDone(tenant.Name)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotTimeout)
	defer cancel()
	// A sandbox the tenant had paused stays paused: the provider resumes
	// only what it paused itself to take the snapshot.
	snap, err := sn.Snapshot(cctx, h.sb, "rb-"+randomHex(10), runbox.SnapshotOptions{NoWorkspace: noWorkspace})
	if err != nil {
		return registry.Snapshot{}, branchError(fmt.Errorf("snapshot sandbox %s: %w", h.rec.ID, err))
	}
	row := registry.Snapshot{
		Tenant: tenant.Name, Name: name, Provider: h.rec.Provider, ProviderName: snap.Name, Sandbox: h.rec.ID,
		Created: snap.Created, Bytes: snap.Bytes, Workspace: snap.Workspace,
	}
	if row.Created.IsZero() {
		row.Created = time.Now()
	}
	if err := s.store.InsertSnapshot(cctx, row); err != nil {
		if rerr := sn.RemoveSnapshot(cctx, snap.Name); rerr != nil {
			s.log.Error("undo snapshot", "snapshot", snap.Name, "err", rerr)
		}
		return registry.Snapshot{}, apiError(err)
	}
	if err := s.store.Lifecycle(cctx, tenant.Name, h.rec.ID, registry.KindSnapshot, name); err != nil {
		s.log.Error("audit", "err", err)
	}
	s.log.Info("snapshot taken", "sandbox", h.rec.ID, "tenant", tenant.Name, "snapshot", name, "provider_name", snap.Name, "bytes", snap.Bytes)
	return row, nil
}

// admitSnapshot lets a snapshot of tenant be taken when its snapshots,
// kept and being taken, are below max_snapshots; else the quota error.
// snapshotDone gives the place back once the snapshot is recorded (or
// failed).
func (s *Server) admitSnapshot(ctx context.Context, tenant registry.Tenant) error {
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	have, err := s.store.CountSnapshots(ctx, tenant.Name)
	if err != nil {
		return apiError(err)
	}
	n := have + s.snapping[tenant.Name]
	if max := s.quotas(tenant).MaxSnapshots; max > 0 && n >= max {
		return quota(tenant.Name, "max_snapshots", n, max)
	}
	s.snapping[tenant.Name]++
	return nil
}

func (s *Server) snapshotDone(tenant string) {
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	s.snapping[tenant]--
}

// unknownSnapshot is the answer for a snapshot the tenant does not have:
// the same for another tenant's as for one that never existed.
func unknownSnapshot(field, name string) error {
	return apiError(fmt.Errorf("%s: no snapshot %q: %w", field, name, runbox.ErrInvalidSpec))
}

// deleteSnapshot removes tenant's snapshot name from its provider and the
// registry. Errors are the API's; a provider refusing (docker, while a
// sandbox stands on it) is FailedPrecondition.
func (s *Server) deleteSnapshot(ctx context.Context, tenant registry.Tenant, name string) error {
	if name == "" {
		return invalid("name", "empty: give a snapshot's name")
	}
	row, err := s.store.GetSnapshot(ctx, tenant.Name, name)
	if errors.Is(err, registry.ErrNotFound) {
		return unknownSnapshot("name", name)
	}
	if err != nil {
		return apiError(err)
	}
	if p, ok := s.cfg.Providers[row.Provider]; ok {
		sn, err := branching.SnapshotterOf(p)
		if err != nil {
			return apiError(err)
		}
		err = sn.RemoveSnapshot(ctx, row.ProviderName)
		if errors.Is(err, runbox.ErrInvalidSpec) && snapshotGone(ctx, sn, row.ProviderName) {
			err = nil // removed already: forget it
		}
		if err != nil {
			if errors.Is(err, runbox.ErrInvalidSpec) {
				return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
					"snapshot %q: the %s provider refuses to remove it while sandboxes made from it exist: delete them first", name, row.Provider))
			}
			return apiError(fmt.Errorf("delete snapshot %q: %w", name, err))
		}
	}
	if err := s.store.DeleteSnapshot(context.WithoutCancel(ctx), tenant.Name, name); err != nil {
		return apiError(err)
	}
	if err := s.store.Lifecycle(context.WithoutCancel(ctx), tenant.Name, row.Sandbox, registry.KindSnapshotDelete, name); err != nil {
		s.log.Error("audit", "err", err)
	}
	return nil
}

// snapshotGone reports whether the provider no longer lists name.
func snapshotGone(ctx context.Context, sn runbox.Snapshotter, name string) bool {
	all, err := sn.Snapshots(ctx)
	if err != nil {
		return false
	}
	for _, s := range all {
		if s.Name == name {
			return false
		}
	}
	return true
}

// resolveSnapshot maps spec.from_snapshot, the tenant's name for one of
// its snapshots, to the provider's name, and fills in the provider when
// the spec names none. A snapshot the tenant does not have is
// InvalidArgument, whoever else has one by that name.
func (s *Server) resolveSnapshot(ctx context.Context, tenant string, spec *runboxv1.SandboxSpec) (registry.Snapshot, error) {
	row, err := s.store.GetSnapshot(ctx, tenant, spec.FromSnapshot)
	if errors.Is(err, registry.ErrNotFound) {
		return registry.Snapshot{}, unknownSnapshot("spec.from_snapshot", spec.FromSnapshot)
	}
	if err != nil {
		return registry.Snapshot{}, apiError(err)
	}
	if spec.Provider == "" {
		spec.Provider = row.Provider
	}
	if spec.Provider != row.Provider {
		return registry.Snapshot{}, invalid("spec.from_snapshot", "snapshot %q was taken by the %s provider, not %s", row.Name, row.Provider, spec.Provider)
	}
	if spec.Image != "" {
		return registry.Snapshot{}, invalid("spec.image", "give an image or from_snapshot, not both")
	}
	return row, nil
}

// forkSandbox snapshots tenant's sandbox key and makes count sandboxes
// from the snapshot, each within the tenant's max_sandboxes. The snapshot
// is kept (the tenant's, until DeleteSnapshot). Errors are the API's; when
// some forks were made before one failed, they are removed.
func (s *Server) forkSandbox(ctx context.Context, tenant registry.Tenant, key string, count int, noWorkspace bool) (registry.Snapshot, []registry.Sandbox, error) {
	if count == 0 {
		count = 1
	}
	if count < 0 || count > maxForks {
		return registry.Snapshot{}, nil, invalid("count", "%d: want 1 to %d", count, maxForks)
	}
	rec, err := s.store.GetSandbox(ctx, tenant.Name, key)
	if errors.Is(err, registry.ErrNotFound) || key == "" {
		return registry.Snapshot{}, nil, notFound(key)
	}
	if err != nil {
		return registry.Snapshot{}, nil, apiError(err)
	}
	sn, err := s.createSnapshot(ctx, tenant, rec.ID, "fork-"+rec.ID+"-"+randomHex(3), noWorkspace)
	if err != nil {
		return registry.Snapshot{}, nil, err
	}
	var out []registry.Sandbox
	for range count {
		f, err := s.createSandbox(ctx, tenant, &runboxv1.SandboxSpec{Provider: rec.Provider, FromSnapshot: sn.Name})
		if err != nil {
			for _, made := range out {
				if derr := s.removeSandbox(context.WithoutCancel(ctx), made, true, registry.KindDelete, "fork failed", false); derr != nil {
					s.log.Error("undo fork", "sandbox", made.ID, "err", derr)
				}
			}
			return registry.Snapshot{}, nil, err
		}
		out = append(out, f)
	}
	return sn, out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
