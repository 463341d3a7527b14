package procbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/processrecord"
)

// Dialer returns a dialer for the sandbox's unix socket, which opens every
// connection with the sandbox's secret (read from its state directory at
// each dial).
func (p *Store) Dialer(sb runbox.Sandbox) runbox.Dialer {
	socket, sbDir := sb.Detail["socket"], sb.Detail["dir"]
	if dir, err := p.sandboxesDir(); err == nil && sb.ID == filepath.Base(sb.ID) {
		if socket == "" {
			socket = filepath.Join(dir, sb.ID, "runboxd.sock")
		}
		if sbDir == "" {
			sbDir = filepath.Join(dir, sb.ID)
		}
	}
	return dialer(socket, sbDir)
}

// dialer dials socket and authenticates the connection with the secret in
// sbDir (processrecord.Dialer).
func dialer(socket, sbDir string) runbox.Dialer { return processrecord.Dialer(socket, sbDir) }

// waitReady polls until runboxd answers Info on dial, it exits, or ctx ends.
func waitReady(ctx context.Context, socket string, dial runbox.Dialer, exited <-chan struct{}) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		// Dial the socket first: it is cheap, and the client's reconnect
		// logic would otherwise retry a socket that does not exist yet.
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			if err := probe(ctx, dial); err == nil {
				return nil
			} else if ctx.Err() != nil {
				return err
			}
		}
		select {
		case <-exited:
			return errors.New("runboxd exited")
		case <-ctx.Done():
			return fmt.Errorf("no answer within %v: %w", startTimeout, ctx.Err())
		case <-t.C:
		}
	}
}

// probe asks the runboxd dial reaches for Info, bounded by aliveTimeout.
func probe(ctx context.Context, dial runbox.Dialer) error {
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	c := client.New(dial)
	defer c.Close()
	_, err := c.Info(ctx)
	return err
}

// stop shuts runboxd down through its API, then makes sure the process is
// gone.
func stop(ctx context.Context, rec Record, sbDir string) error {
	sctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
		defer cancel()
	}
	c := client.New(dialer(rec.Socket, sbDir), client.WithSandboxName(rec.ID))
	// An error here is expected when runboxd exits before answering; whether
	// it stopped is decided by watching the process below.
	_ = c.Shutdown(sctx, 0)
	c.Close()
	if waitExit(ctx, rec, exitTimeout) {
		return nil
	}
	if err := killRecord(rec); err != nil {
		return fmt.Errorf("kill runboxd (pid %d): %w", rec.Pid, err)
	}
	if !waitExit(context.WithoutCancel(ctx), rec, exitTimeout) {
		return fmt.Errorf("runboxd (pid %d) survived SIGKILL", rec.Pid)
	}
	return nil
}

// waitExit polls until the record's process has exited or d has passed.
func waitExit(ctx context.Context, rec Record, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		if !procAlive(rec) {
			return true
		}
		select {
		case <-ctx.Done():
			return !procAlive(rec)
		case <-deadline.C:
			return !procAlive(rec)
		case <-t.C:
		}
	}
}

// isAlive reports whether the record's runboxd is the process it recorded
// and answers: it accepts a connection with the sandbox's secret. That is
// the handshake alone, without HTTP/2 and an Info call on top (a third of
// the cost of looking a sandbox up before an exec, measured in
// docs/performance.md); the caller's own call proves the rest.
func isAlive(ctx context.Context, rec Record, sbDir string) bool {
	conn := aliveConn(ctx, rec, sbDir)
	if conn == nil {
		return false
	}
	conn.Close()
	return true
}

// aliveConn is isAlive's probe that keeps its connection (processrecord.AliveConn).
func aliveConn(ctx context.Context, rec Record, sbDir string) net.Conn {
	return processrecord.AliveConn(ctx, rec, sbDir)
}
