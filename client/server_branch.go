package client

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

var (
	_ runbox.Pauser      = (*Server)(nil)
	_ runbox.Snapshotter = (*Server)(nil)
)

// Pause freezes every process of the sandbox's commands (docker: the
// whole container) and stops their deadlines and its idle clock; an exec
// on it then fails with runbox.ErrSandboxPaused. Pausing a paused sandbox
// is not an error. Only sb.ID (or its name) is used.
func (s *Server) Pause(ctx context.Context, sb runbox.Sandbox) error {
	_, err := s.svc.PauseSandbox(ctx, connect.NewRequest(&runboxv1.PauseSandboxRequest{SandboxId: sb.ID}))
	return s.error("pause", sb.ID, ctx, err)
}

// Resume thaws what Pause froze. Resuming a running sandbox is not an
// error.
func (s *Server) Resume(ctx context.Context, sb runbox.Sandbox) error {
	_, err := s.svc.ResumeSandbox(ctx, connect.NewRequest(&runboxv1.ResumeSandboxRequest{SandboxId: sb.ID}))
	return s.error("resume", sb.ID, ctx, err)
}

// Snapshot takes a snapshot of sb's filesystem changes (and its
// workspace unless opts say not) as the tenant's snapshot name (""
// generates one). A name in use is runbox.ErrNameInUse; over the tenant's
// max_snapshots, runbox.ErrQuotaExceeded; a provider that cannot,
// runbox.ErrUnsupported.
func (s *Server) Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error) {
	resp, err := s.svc.CreateSnapshot(ctx, connect.NewRequest(&runboxv1.CreateSnapshotRequest{
		SandboxId: sb.ID, Name: name, NoWorkspace: opts.NoWorkspace,
	}))
	if err != nil {
		return runbox.Snapshot{}, s.error("snapshot", sb.ID, ctx, err)
	}
	return snapshotFromWire(resp.Msg.GetSnapshot()), nil
}

// Snapshots lists the tenant's snapshots, oldest first.
func (s *Server) Snapshots(ctx context.Context) ([]runbox.Snapshot, error) {
	resp, err := s.svc.ListSnapshots(ctx, connect.NewRequest(&runboxv1.ListSnapshotsRequest{}))
	if err != nil {
		return nil, s.error("list snapshots", "", ctx, err)
	}
	out := make([]runbox.Snapshot, 0, len(resp.Msg.GetSnapshots()))
	for _, sn := range resp.Msg.GetSnapshots() {
		out = append(out, snapshotFromWire(sn))
	}
	return out, nil
}

// RemoveSnapshot deletes the tenant's snapshot name. An unknown name is
// runbox.ErrInvalidSpec. Sandboxes made from it keep working on local;
// docker refuses while such a sandbox exists.
func (s *Server) RemoveSnapshot(ctx context.Context, name string) error {
	_, err := s.svc.DeleteSnapshot(ctx, connect.NewRequest(&runboxv1.DeleteSnapshotRequest{Name: name}))
	return s.error("remove snapshot", "", ctx, err)
}

// Fork snapshots the sandbox (id or name) and makes count sandboxes from
// the snapshot, each independent of the others and of the parent. It
// returns them and the snapshot, which is kept until RemoveSnapshot.
func (s *Server) Fork(ctx context.Context, sandbox string, count int, opts runbox.SnapshotOptions) ([]runbox.Sandbox, runbox.Snapshot, error) {
	resp, err := s.svc.ForkSandbox(ctx, connect.NewRequest(&runboxv1.ForkSandboxRequest{
		SandboxId: sandbox, Count: int32(count), NoWorkspace: opts.NoWorkspace,
	}))
	if err != nil {
		return nil, runbox.Snapshot{}, s.error("fork", sandbox, ctx, err)
	}
	out := make([]runbox.Sandbox, 0, len(resp.Msg.GetSandboxes()))
	for _, sb := range resp.Msg.GetSandboxes() {
		out = append(out, s.sandbox(sb))
	}
	return out, snapshotFromWire(resp.Msg.GetSnapshot()), nil
}

// snapshotFromWire converts the server's description of a snapshot.
func snapshotFromWire(p *runboxv1.Snapshot) runbox.Snapshot {
	return runbox.Snapshot{
		Name: p.GetName(), Provider: p.GetProvider(), Sandbox: p.GetSandboxId(),
		Created: time.UnixMilli(p.GetCreatedAtUnixMs()), Workspace: p.GetWorkspace(), Bytes: p.GetBytes(),
	}
}
