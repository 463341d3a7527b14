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
// A sandbox whose runboxd is already gone (or does not answer) is removed
// only with force (its commands' leftovers may have run unsupervised),
// else the error wraps runbox.ErrSandboxLost when runboxd is gone. With force, a host that cannot be reached at all
// loses only the record here, and the error is nil.
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	fail := func(err error) error { return &runbox.Error{Op: "remove", Sandbox: sb.ID, Err: err} }
	if !validID(sb.ID) {
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
	c := client.New(p.Dialer(runbox.Sandbox{ID: rec.ID}), client.WithSandboxName(rec.ID))
	defer c.Close()
	ictx, cancel := context.WithTimeout(ctx, aliveTimeout)
	_, err = c.Info(ictx)
	cancel()
	wait := 0
	switch {
	case err == nil:
		shutdown(ctx, c)
		wait = int(exitTimeout / time.Second)
	case !force:
		return fail(fmt.Errorf("runboxd on %s does not answer; remove it with force: %w", rec.Endpoint, err))
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute+exitTimeout)
	defer cancel()
	if _, err := l.run(cctx, "remove the sandbox", cleanupScript, nil, strconv.Itoa(rec.Pid), rec.StartTime, rec.ID, rec.RemoteDir, strconv.Itoa(wait)); err != nil {
		return fail(err)
	}
	return removeLocal(sbDir, fail)
}

// shutdown asks runboxd to stop every exec and exit (the cleanup that
// follows waits for it to be gone, and kills it if not).
func shutdown(ctx context.Context, c *client.Client) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
		defer cancel()
	}
	// An error is expected when runboxd exits before its answer gets out;
	// whether it stopped is decided by looking at the process.
	_ = c.Shutdown(ctx, 0)
}

// removeLocal removes the sandbox's record and secret here.
func removeLocal(sbDir string, fail func(error) error) error {
	if err := os.RemoveAll(sbDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(fmt.Errorf("remove %s: %w", sbDir, err))
	}
	return nil
}
