package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/supervisor"
)

// The supervisor reaps every child of this test binary: no os/exec here.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serve starts a server with a fresh supervisor on a socket in a temporary
// directory; served receives what Serve returns.
func serve(t *testing.T) (srv *daemon.Server, socket string, served <-chan error) {
	t.Helper()
	dir := t.TempDir()
	sup, err := supervisor.New(supervisor.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	socket = filepath.Join(dir, "d.sock")
	ln, err := daemon.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	srv = daemon.NewServer(sup, nil)
	ch := make(chan error, 1)
	go func() { ch <- srv.Serve(context.Background(), ln) }()
	return srv, socket, ch
}

// waitInBackground waits for p and sends its result.
func waitInBackground(t *testing.T, ctx context.Context, p *client.Process) <-chan runbox.Result {
	waited := make(chan runbox.Result, 1)
	go func() {
		res, err := p.Wait(ctx)
		if err != nil {
			t.Errorf("wait: %v", err)
		}
		waited <- res
	}()
	return waited
}

func TestShutdownRPCStopsExecsAndServer(t *testing.T) {
	srv, socket, served := serve(t)

	ctx := testCtx(t)
	c := client.DialUnix(socket)
	defer c.Close()
	// A command that ignores SIGTERM, with a background child: the stop
	// protocol must still end both.
	p, err := c.Start(ctx, "trap '' TERM; sleep 31337 & while :; do sleep 0.05; done", client.WithGrace(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	waited := waitInBackground(t, ctx, p)
	time.Sleep(100 * time.Millisecond) // let the shell set its trap

	if err := c.Shutdown(ctx, 200*time.Millisecond); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// The answer means every exec has stopped.
	if !isClosed(srv.ShutdownRequested()) {
		t.Error("shutdown answered but the server was not asked to stop")
	}
	res := <-waited
	if !res.Cancelled || res.Killed < 2 || res.Survivors != 0 {
		t.Errorf("result = %+v, want cancelled, >= 2 killed, no survivors", res)
	}
	if err := syscall.Kill(res.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("leader %d still exists: %v", res.Pid, err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after the Shutdown RPC")
	}
	if _, err := os.Lstat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := c.Info(ctx); !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("info after shutdown: %v, want ErrSandboxLost", err)
	}
}

// TestShutdownWithIdleClient stops a daemon while another client keeps an
// idle connection open (Go's client keeps it after the server's GOAWAY), so
// the daemon closes that connection itself once every answer is out: no
// answer may be lost to it — the Shutdown call's, an exec stream's exit
// event — and Serve must return. How soon is logged, not asserted (about
// 0.1 s, against the HTTP/2 GOAWAY timeout's 1 s before);
// BenchmarkLifecycleHostClientOpen in provider/local measures it.
func TestShutdownWithIdleClient(t *testing.T) {
	_, socket, served := serve(t)

	ctx := testCtx(t)
	idle := client.DialUnix(socket)
	defer idle.Close()
	if _, err := idle.Info(ctx); err != nil {
		t.Fatal(err)
	}
	runner := client.DialUnix(socket)
	defer runner.Close()
	p, err := runner.Start(ctx, "sleep 31337")
	if err != nil {
		t.Fatal(err)
	}
	waited := waitInBackground(t, ctx, p)

	c := client.DialUnix(socket)
	defer c.Close()
	if err := c.Shutdown(ctx, 200*time.Millisecond); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	answered := time.Now()
	if res := <-waited; !res.Cancelled || res.Survivors != 0 {
		t.Errorf("result = %+v, want cancelled, no survivors", res)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
		t.Logf("Serve returned %v after the Shutdown answer", time.Since(answered))
	case <-ctx.Done():
		t.Fatal("Serve did not return after the Shutdown RPC")
	}
	if _, err := idle.Info(ctx); !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("idle client after shutdown: %v, want ErrSandboxLost", err)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestListen(t *testing.T) {
	dir := t.TempDir()

	// A stale socket (nobody listening) is replaced.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	ln, err := daemon.Listen(stale)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	fi, err := os.Stat(stale)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode(), err)
	}

	// A live one is not.
	if _, err := daemon.Listen(stale); err == nil || !strings.Contains(err.Error(), "listening") {
		t.Errorf("live socket: %v", err)
	}
	ln.Close()

	// Nor is a file that is not a socket.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.Listen(file); err == nil {
		t.Error("listening over a regular file succeeded")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep me" {
		t.Error("regular file was clobbered")
	}
}

func TestProxy(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "echo.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, conn) // echo until the proxy half-closes
	}()

	var out bytes.Buffer
	if err := daemon.Proxy(testCtx(t), socket, strings.NewReader("ping"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "ping" {
		t.Errorf("proxied %q, want %q", out.String(), "ping")
	}
}
