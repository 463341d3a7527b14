package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// slowDaemon starts every exec, then holds its result until release is
// closed, as a daemon busy stopping a fork bomb on a loaded machine does.
// It has the exec, when asked, while known is set.
type slowDaemon struct {
	runboxv1connect.UnimplementedRunboxServiceHandler
	release chan struct{}
	known   atomic.Bool
	id      atomic.Value
}

func (d *slowDaemon) Run(ctx context.Context, req *connect.Request[runboxv1.RunRequest], stream *connect.ServerStream[runboxv1.ExecEvent]) error {
	id := req.Msg.GetSpec().GetId()
	d.id.Store(id)
	if err := stream.Send(&runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Started{Started: &runboxv1.Started{Id: id, Pid: 42}}}); err != nil {
		return err
	}
	select {
	case <-d.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return stream.Send(&runboxv1.ExecEvent{Event: &runboxv1.ExecEvent_Exited{Exited: &runboxv1.Exited{
		Result: &runboxv1.Result{Id: id, ExitCode: 143, Signal: "TERM", TimedOut: true},
	}}})
}

// Signal answers the client's overdue question, signal 0: the exec is
// there while known is set, and unknown after.
func (d *slowDaemon) Signal(_ context.Context, req *connect.Request[runboxv1.SignalRequest]) (*connect.Response[runboxv1.SignalResponse], error) {
	if id, _ := d.id.Load().(string); id == "" || req.Msg.GetId() != id || !d.known.Load() {
		return nil, wire.ToConnectError(fmt.Errorf("exec %s: %w", req.Msg.GetId(), runbox.ErrExecNotFound))
	}
	return connect.NewResponse(&runboxv1.SignalResponse{Signalled: 1}), nil
}

// serveSlow serves d on a unix socket for the test's life.
func serveSlow(t *testing.T, d *slowDaemon) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "slow.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(runboxv1connect.NewRunboxServiceHandler(d))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: mux, Protocols: &protocols}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return socket
}

// TestOverdueButBusyWaitsForResult: a result the daemon delivers well past
// the exec's timeout + grace + headroom is still the result, not
// ErrSandboxLost, while the daemon answers and still has the exec; a daemon
// that no longer knows the exec, or keeps it past the most the client
// waits, is lost.
func TestOverdueButBusyWaitsForResult(t *testing.T) {
	const headroom = 200 * time.Millisecond
	opts := []client.ExecOption{client.WithTimeout(100 * time.Millisecond), client.WithGrace(100 * time.Millisecond)}

	t.Run("busy", func(t *testing.T) {
		d := &slowDaemon{release: make(chan struct{})}
		d.known.Store(true)
		c := client.DialUnix(serveSlow(t, d), client.WithOverdue(headroom, 10*time.Second))
		defer c.Close()
		// Released after several overdue checks have found it busy.
		time.AfterFunc(1500*time.Millisecond, func() { close(d.release) })
		res, err := c.Exec(testCtx(t), "sleep 300", opts...)
		if err != nil || !res.TimedOut || res.ExitCode != 143 {
			t.Errorf("result past the deadline from a busy daemon: %+v, %v; want timed out, no error", res, err)
		}
	})
	t.Run("forgotten", func(t *testing.T) {
		d := &slowDaemon{release: make(chan struct{})}
		defer close(d.release)
		c := client.DialUnix(serveSlow(t, d), client.WithOverdue(headroom, 10*time.Second))
		defer c.Close()
		if _, err := c.Exec(testCtx(t), "sleep 300", opts...); !errors.Is(err, runbox.ErrSandboxLost) {
			t.Errorf("a daemon that no longer knows the exec: %v, want ErrSandboxLost", err)
		}
	})
	t.Run("past-max", func(t *testing.T) {
		d := &slowDaemon{release: make(chan struct{})}
		defer close(d.release)
		d.known.Store(true)
		c := client.DialUnix(serveSlow(t, d), client.WithOverdue(headroom, 600*time.Millisecond))
		defer c.Close()
		if _, err := c.Exec(testCtx(t), "sleep 300", opts...); !errors.Is(err, runbox.ErrSandboxLost) {
			t.Errorf("a daemon that keeps the exec past the most the client waits: %v, want ErrSandboxLost", err)
		}
	})
}

// TestSignalZeroAsksWhetherTheDaemonHasTheExec: the overdue question on a
// real runboxd. Signal 0 delivers nothing to a running exec, and tells a
// running exec, an ended one the daemon keeps and an unknown id apart.
func TestSignalZeroAsksWhetherTheDaemonHasTheExec(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	// It waits for a line on stdin, so it is running when asked however
	// slow the machine, and ends when the test writes the line.
	p, err := c.Start(ctx, `trap 'echo got a signal; exit 3' HUP INT TERM USR1; read line; echo "read $line"`, client.WithStdinStream())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Signal(ctx, p.ID(), 0); err != nil || n == 0 {
		t.Errorf("signal 0 to a running exec: %d processes, %v; want some processes and no error", n, err)
	}
	if err := p.WriteStdin(ctx, []byte("it\n")); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || !res.OK() || string(res.Stdout) != "read it\n" {
		t.Errorf("the exec asked with signal 0: %+v, %v; want it undisturbed (\"read it\", exit 0)", res, err)
	}
	if _, err := c.Signal(ctx, p.ID(), 0); !errors.Is(err, runbox.ErrNotRunning) {
		t.Errorf("signal 0 to an ended exec the daemon keeps: %v; want ErrNotRunning", err)
	}
	if _, err := c.Signal(ctx, "no-such-exec-"+p.ID(), 0); !errors.Is(err, runbox.ErrExecNotFound) {
		t.Errorf("signal 0 to an unknown id: %v; want ErrExecNotFound", err)
	}
}
