package ssh

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Remove stops every exec with the stop protocol (the Shutdown RPC), waits
// for runboxd to exit and kills it if it has not within a bound, kills
// whatever the sandbox's commands left running on the host (processes
// whose environment carries its RUNBOX_SANDBOX), removes its state
// directory on the host, and then its record here. The cached runboxd
// binary stays for the next sandbox.
//
// A sandbox whose runboxd is already gone is removed only with force (its
// commands' leftovers may have run unsupervised), else the error wraps
// runbox.ErrSandboxLost. With force, a host that cannot be reached at all
// loses only the record here, and the error is nil.
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	fail := func(err error) error { return &runbox.Error{Op: "remove", Sandbox: sb.ID, Err: err} }
	if !validID.MatchString(sb.ID) {
		return fail(runbox.ErrSandboxNotFound)
	}
	rec, sbDir, err := p.find(sb.ID)
	if err != nil {
		return fail(err)
	}
	if rec.ID != sb.ID {
		return fail(runbox.ErrSandboxNotFound)
	}
	if rec.RemoteDir == "" {
		// Create never got as far as starting runboxd.
		return removeLocal(sbDir, fail)
	}
	l, err := p.linkFor(rec.Target)
	if err == nil {
		_, err = l.client(ctx)
	}
	if err != nil {
		if force {
			return removeLocal(sbDir, fail)
		}
		return fail(fmt.Errorf("cannot reach the host to stop the sandbox (%w); remove only its record here with force", err))
	}
	alive, _, err := l.status(ctx, rec, false)
	if err != nil {
		return fail(err)
	}
	if !alive && !force {
		return fail(fmt.Errorf("%w: runboxd (pid %d) is not running on %s; remove it with force", runbox.ErrSandboxLost, rec.Pid, rec.Endpoint))
	}
	if alive {
		p.shutdown(ctx, l, rec)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := l.run(cctx, "remove the sandbox", cleanupScript, nil, strconv.Itoa(rec.Pid), rec.StartTime, rec.ID, rec.RemoteDir); err != nil {
		return fail(err)
	}
	return removeLocal(sbDir, fail)
}

// shutdown asks runboxd to stop every exec and exit, and waits up to
// exitTimeout for it to be gone (the cleanup that follows kills it if not).
func (p *Provider) shutdown(ctx context.Context, l *link, rec record) {
	sctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
		defer cancel()
	}
	c := client.New(p.Dialer(runbox.Sandbox{ID: rec.ID}), client.WithSandboxName(rec.ID))
	// An error is expected when runboxd exits before its answer gets out;
	// whether it stopped is decided by looking at the process.
	_ = c.Shutdown(sctx, 0)
	c.Close()
	deadline := time.Now().Add(exitTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		alive, _, err := l.status(ctx, rec, false)
		if err == nil && !alive {
			return
		}
		time.Sleep(5 * pollInterval)
	}
}

// removeLocal removes the sandbox's record and secret here.
func removeLocal(sbDir string, fail func(error) error) error {
	if err := os.RemoveAll(sbDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("remove %s: %w", sbDir, err))
	}
	return nil
}
