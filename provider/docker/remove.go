package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// Remove stops every exec with the stop protocol (the Shutdown RPC through
// runboxd), waits for the container to stop, removes it, and deletes the
// sandbox's host state directory.
//
// A container that already stopped (docker kill, an engine restart) is
// removed without force: when PID 1 exits the kernel kills every process in
// the container, so nothing it started can have outlived it. Force matters
// for a running container whose runboxd does not answer: without it Remove
// fails with runbox.ErrSandboxLost; with it the container is killed.
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	fail := func(err error) error { return &runbox.Error{Op: "remove", Sandbox: sb.ID, Err: err} }
	if !sandboxkey.ValidID(sb.ID) {
		return fail(runbox.ErrSandboxNotFound)
	}
	cli, err := p.engine()
	if err != nil {
		return fail(err)
	}
	cs, err := containers(ctx, cli, sb.ID)
	if err != nil {
		return fail(err)
	}
	// Where the state directory is: the container's label says; without a
	// container, this provider's home (or what the caller was told).
	dirs := []string{}
	if home, err := p.home(); err == nil {
		dirs = append(dirs, filepath.Join(home, "docker", sb.ID))
	}
	if d := sb.Detail["dir"]; d != "" && filepath.Base(d) == sb.ID {
		dirs = append(dirs, d)
	}
	for _, c := range cs {
		if d := c.stateDir(); d != "" {
			dirs = append(dirs, d)
		}
	}
	removeDirs := func() (bool, error) {
		found := false
		for _, d := range dirs {
			if _, err := os.Stat(d); err != nil {
				continue
			}
			found = true
			if err := os.RemoveAll(d); err != nil {
				return found, fmt.Errorf("remove %s: %w", d, err)
			}
		}
		return found, nil
	}
	if len(cs) == 0 {
		found, err := removeDirs()
		if err != nil {
			return fail(err)
		}
		if !found {
			return fail(runbox.ErrSandboxNotFound)
		}
		return nil
	}
	for _, c := range cs {
		if err := p.removeContainer(ctx, cli, c, force); err != nil {
			return fail(err)
		}
	}
	if _, err := removeDirs(); err != nil {
		return fail(err)
	}
	return nil
}

// removeContainer shuts c's runboxd down and removes c.
func (p *Provider) removeContainer(ctx context.Context, cli *moby.Client, c ctr, force bool) error {
	if c.State == container.StateRunning {
		sctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			sctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
			defer cancel()
		}
		rc := rbclient.New(p.dialerFor(c), rbclient.WithSandboxName(c.Labels[LabelSandbox]))
		// An error is expected when runboxd exits before its answer gets
		// out; whether it stopped is decided by the container's state.
		shutdownErr := rc.Shutdown(sctx, 0)
		rc.Close()
		if !waitStopped(ctx, cli, c.ID, exitTimeout) && shutdownErr != nil && !force {
			return fmt.Errorf("%w: runboxd in running container %.12s does not answer (%v); remove it with force",
				runbox.ErrSandboxLost, c.ID, shutdownErr)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := cli.ContainerRemove(rctx, c.ID, moby.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %.12s: %w", c.ID, err)
	}
	return nil
}

// waitStopped waits up to d for the container to stop running and reports
// whether it did.
func waitStopped(ctx context.Context, cli *moby.Client, id string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w := cli.ContainerWait(ctx, id, moby.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
		return true
	case err := <-w.Error:
		return cerrdefs.IsNotFound(err)
	}
}
