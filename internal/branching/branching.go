// Package branching is what the CLI and runbox serve share to pause,
// resume and snapshot a sandbox, so that both do it the same way: a
// provider that pauses the whole sandbox (runbox.Pauser) is asked to,
// every other sandbox is paused by its runboxd.
package branching

import (
	"context"
	"fmt"

	"github.com/runbox/runbox"
)

// Daemon is a sandbox's runboxd as far as pausing goes (a *client.Client,
// or serve's connection to it).
type Daemon interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// SetPaused pauses sb (or, with pause false, resumes it): through p when
// p is a runbox.Pauser, else through sb's runboxd, which daemon opens
// (the func it returns closes it). daemon is called only when needed.
func SetPaused(ctx context.Context, p runbox.Provider, sb runbox.Sandbox, pause bool, daemon func() (Daemon, func())) error {
	if pp, ok := p.(runbox.Pauser); ok {
		if pause {
			return pp.Pause(ctx, sb)
		}
		return pp.Resume(ctx, sb)
	}
	d, done := daemon()
	defer done()
	if pause {
		return d.Pause(ctx)
	}
	return d.Resume(ctx)
}

// SnapshotterOf is p as a runbox.Snapshotter, or an ErrUnsupported error
// naming it.
func SnapshotterOf(p runbox.Provider) (runbox.Snapshotter, error) {
	if s, ok := p.(runbox.Snapshotter); ok {
		return s, nil
	}
	return nil, fmt.Errorf("provider %s cannot snapshot: %w", p.Name(), runbox.ErrUnsupported)
}
