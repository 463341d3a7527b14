// Package lostcheck_test tests how the client tells a daemon that let an
// exec go from one that restarted. Each test runs supervisors of its own,
// one at a time: a supervisor reaps every child of its process (wait4(-1)),
// so these cannot share a process with the client package's shared daemon.
package lostcheck_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/supervisor"
)

// startTestDaemon serves a supervisor with retention at socket until the
// returned stop is called.
func startTestDaemon(t *testing.T, dir, socket string, retention time.Duration) (sup *supervisor.Supervisor, stop func()) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Config{Dir: dir, Version: "test", Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(socket)
	ln, err := daemon.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- daemon.NewServer(sup, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))).Serve(ctx, ln)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-served
			sup.Shutdown(context.Background(), 0)
		})
	}
	t.Cleanup(stop)
	return sup, stop
}

// cuttableDialer dials socket; cut closes the live connections and makes
// dials fail until restore.
type cuttableDialer struct {
	socket string
	down   atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func (d *cuttableDialer) dial(ctx context.Context) (net.Conn, error) {
	if d.down.Load() {
		return nil, errors.New("test: the network is down")
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", d.socket)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, conn)
		d.mu.Unlock()
	}
	return conn, err
}

func (d *cuttableDialer) cut() {
	d.down.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

func (d *cuttableDialer) restore() { d.down.Store(false) }

// TestForgottenExecIsNotALostSandbox: a client following an exec is cut
// off while the exec ends and the daemon, which keeps running, lets its
// result go (a short retention here; the budget of retained results does
// the same under load). When the client gets through again, the error is
// runbox.ErrExecNotFound, not runbox.ErrSandboxLost: a sandbox that answers
// is never reported lost (before, the client said "did it restart?" and
// ErrSandboxLost).
func TestForgottenExecIsNotALostSandbox(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "runboxd.sock")
	sup, _ := startTestDaemon(t, dir, socket, 100*time.Millisecond)
	d := &cuttableDialer{socket: socket}
	c := client.New(d.dial, client.WithReconnectWindow(time.Minute))
	defer c.Close()
	ctx := testCtx(t)
	p, err := c.Start(ctx, "sleep 0.3; echo done")
	if err != nil {
		t.Fatal(err)
	}
	d.cut()
	// The exec ends and is forgotten while the client cannot reach it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := sup.Get(p.ID()); errors.Is(err, runbox.ErrExecNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon kept the exec past its retention")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.restore()
	_, err = p.Wait(ctx)
	if errors.Is(err, runbox.ErrSandboxLost) {
		t.Fatalf("a forgotten exec of a daemon that answers was reported as a lost sandbox: %v", err)
	}
	if !errors.Is(err, runbox.ErrExecNotFound) {
		t.Fatalf("Wait: %v, want ErrExecNotFound", err)
	}
	t.Log(err)
}

// TestRestartedDaemonIsALostSandbox: the daemon an exec ran on is gone and
// another answers on its socket (started after the exec): the exec died
// with the first, and the client says the sandbox was lost.
func TestRestartedDaemonIsALostSandbox(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "runboxd.sock")
	_, stopFirst := startTestDaemon(t, filepath.Join(dir, "a"), socket, time.Minute)
	d := &cuttableDialer{socket: socket}
	c := client.New(d.dial, client.WithReconnectWindow(time.Minute))
	defer c.Close()
	ctx := testCtx(t)
	p, err := c.Start(ctx, "sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	d.cut()
	stopFirst()
	time.Sleep(10 * time.Millisecond) // the next daemon's start comes after the exec's
	startTestDaemon(t, filepath.Join(dir, "b"), socket, time.Minute)
	d.restore()
	_, err = p.Wait(ctx)
	if !errors.Is(err, runbox.ErrSandboxLost) {
		t.Fatalf("Wait after the daemon restarted: %v, want ErrSandboxLost", err)
	}
	t.Log(err)
}

// testCtx bounds a test's calls generously: a liveness bound, not a timing
// assertion.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
