package docker

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
)

// proxyCmd is the command of the exec stream.
var proxyCmd = []string{ctrRunboxd, "proxy", "--socket", ctrSocket}

// Dialer returns how to reach the sandbox's runboxd: its socket on this
// machine when the sandbox has one and it is here (and exec streams are not
// forced), else a docker exec of runboxd proxy.
func (p *Provider) Dialer(sb runbox.Sandbox) runbox.Dialer {
	id := sb.Detail["container"]
	if id == "" {
		id = "runbox-sandbox:" + sb.ID // resolved by label at dial time
	}
	return p.withSecret(p.dialer(id, sb.Detail["socket"]), id, "")
}

// PassesFDs says the sandbox's runboxd is reached over its socket on this
// machine (not a docker exec stream), so connected sockets can travel to
// and from it (internal/fdpass: runbox port-forward splices them).
func (p *Provider) PassesFDs(sb runbox.Sandbox) bool {
	socket := sb.Detail["socket"]
	if p.execForced() || socket == "" || pausedMarked(socket) {
		return false
	}
	fi, err := os.Stat(socket)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

func (p *Provider) dialer(containerID, socket string) runbox.Dialer {
	forced := p.execForced()
	return func(ctx context.Context) (net.Conn, error) {
		// Checked on the exec stream too: a docker exec into a container
		// whose cgroup Pause froze (the engine does not know) would hang.
		if pausedMarked(socket) {
			return nil, errPaused(containerID)
		}
		if !forced && socket != "" {
			if fi, err := os.Stat(socket); err == nil && fi.Mode().Type() == fs.ModeSocket {
				var d net.Dialer
				conn, err := d.DialContext(ctx, "unix", socket)
				if err != nil && ctx.Err() == nil {
					return nil, p.lostCause(ctx, containerID, err)
				}
				return conn, err
			}
		}
		return p.dialExec(ctx, containerID)
	}
}

// lostCause explains a failed dial: when the engine says the container is
// gone or not running, the sandbox is lost for good, and the error wraps
// runbox.ErrSandboxLost and names the container; otherwise err is returned
// as it is (the client retries).
func (p *Provider) lostCause(ctx context.Context, containerID string, err error) error {
	cli, cerr := p.engine()
	if cerr != nil || strings.HasPrefix(containerID, "runbox-sandbox:") {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	ir, ierr := cli.ContainerInspect(ctx, containerID, moby.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(ierr):
		return fmt.Errorf("%w: container %.12s is gone: %w", runbox.ErrSandboxLost, containerID, err)
	case ierr == nil && ir.Container.State != nil && ir.Container.State.Paused:
		return errPaused(containerID)
	case ierr == nil && ir.Container.State != nil && !ir.Container.State.Running:
		st := ir.Container.State
		return fmt.Errorf("%w: container %.12s is %s (exit code %d%s): %w",
			runbox.ErrSandboxLost, containerID, st.Status, st.ExitCode, errSuffix(st.Error), err)
	}
	return err
}

// dialExec opens a stream to runboxd through a docker exec of runboxd
// proxy, hijacked through the Engine API.
func (p *Provider) dialExec(ctx context.Context, containerID string) (net.Conn, error) {
	cli, err := p.engine()
	if err != nil {
		return nil, err
	}
	if sbID, ok := strings.CutPrefix(containerID, "runbox-sandbox:"); ok {
		cs, err := containers(ctx, cli, sbID)
		if err != nil {
			return nil, err
		}
		if len(cs) == 0 {
			return nil, fmt.Errorf("no container for sandbox %s: %w", sbID, runbox.ErrSandboxNotFound)
		}
		containerID = cs[0].ID
	}
	// The same Tty flag (false) goes to create and attach: the engine then
	// multiplexes the output, which execConn takes apart.
	ec, err := cli.ExecCreate(ctx, containerID, moby.ExecCreateOptions{
		Cmd: proxyCmd, AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		err = fmt.Errorf("docker exec runboxd proxy in %.12s: %w", containerID, err)
		if cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err) {
			err = p.lostCause(ctx, containerID, err)
		}
		return nil, err
	}
	ar, err := cli.ExecAttach(ctx, ec.ID, moby.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach to docker exec %.12s in %.12s: %w", ec.ID, containerID, err)
	}
	return newExecConn(ar.Conn, ar.Reader, ar.CloseWrite, ec.ID), nil
}
