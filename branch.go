package runbox

import (
	"context"
	"time"
)

// Pauser is a Provider whose pause freezes the whole sandbox, runboxd
// included (docker's ContainerPause), so it must also keep the sandbox's
// state where a frozen runboxd cannot answer. A provider that is not a
// Pauser is paused through its runboxd (client.Pause), which freezes the
// commands and keeps answering.
type Pauser interface {
	// Pause freezes every process of sb's commands and stops their
	// deadlines and idle timeouts. Pausing a paused sandbox is not an
	// error.
	Pause(ctx context.Context, sb Sandbox) error
	// Resume thaws what Pause froze. Resuming a running sandbox is not an
	// error.
	Resume(ctx context.Context, sb Sandbox) error
}

// SnapshotOptions says what a snapshot takes.
type SnapshotOptions struct {
	// NoWorkspace leaves the sandbox's workspace (its Workdir) out: a
	// sandbox made from the snapshot then gets the workspace its own
	// SandboxSpec names, or none.
	NoWorkspace bool
}

// Snapshot is a sandbox's filesystem, as it was when the snapshot was
// taken, kept as an immutable layer that new sandboxes stack their own
// writable layer on (SandboxSpec.FromSnapshot).
type Snapshot struct {
	// Name is the snapshot's unique name.
	Name string
	// Provider is the provider that took it; only it can use it.
	Provider string
	// Sandbox is the id of the sandbox it was taken of.
	Sandbox string
	// Created is when it was taken.
	Created time.Time
	// Workspace says the snapshot holds a copy of the sandbox's workspace.
	Workspace bool
	// Bytes is the disk it takes (its filesystem changes and workspace),
	// where the provider knows.
	Bytes int64
	// Detail holds provider-specific facts (an image tag, a directory).
	Detail map[string]string
}

// Snapshotter is a Provider that can snapshot a sandbox's filesystem and
// make sandboxes from a snapshot. A provider that cannot is not one, and
// the CLI and serve say so with ErrUnsupported.
type Snapshotter interface {
	// Snapshot pauses sb, takes its filesystem changes (and its
	// workspace unless opts say not) as the snapshot name, and resumes it.
	// A name in use is ErrInvalidSpec.
	Snapshot(ctx context.Context, sb Sandbox, name string, opts SnapshotOptions) (Snapshot, error)
	// Snapshots lists the provider's snapshots, oldest first.
	Snapshots(ctx context.Context) ([]Snapshot, error)
	// RemoveSnapshot deletes a snapshot. Sandboxes made from it keep
	// working where the provider can tell (a local sandbox holds the layer
	// open by reference; docker refuses to remove an image in use).
	RemoveSnapshot(ctx context.Context, name string) error
}
