package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
)

// A daemon that refuses the client's secret makes every call fail with
// runbox.ErrUnauthenticated inside a *runbox.Error: not ErrSandboxLost,
// not retried until the reconnect window or the call's deadline.
func TestRefusedSecretIsUnauthenticated(t *testing.T) {
	socket := refusingDaemon(t)
	wrong, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}

	var dials atomic.Int32
	c := client.New(daemonauth.Dialer(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}, wrong), client.WithSandboxName("sb"))
	defer c.Close()
	ctx := testCtx(t)
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"info", func() error { _, err := c.Info(ctx); return err }},
		{"exec", func() error { _, err := c.Exec(ctx, "true"); return err }},
		{"attach", func() error { _, err := c.Attach(ctx, "x"); return err }},
		{"cancel", func() error { return c.Cancel(ctx, "x", 0) }},
		{"stat", func() error { _, err := c.Stat(ctx, "/"); return err }},
		{"read file", func() error { _, _, err := c.ReadFile(ctx, "/etc/hostname"); return err }},
	} {
		dials.Store(0)
		err := call.do()
		if !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) || ctx.Err() != nil {
			t.Errorf("%s: %v; want runbox.ErrUnauthenticated", call.name, err)
			continue
		}
		if e, ok := errors.AsType[*runbox.Error](err); !ok || e.Sandbox != "sb" {
			t.Errorf("%s: %#v; want a *runbox.Error naming the sandbox", call.name, err)
		}
		if n := dials.Load(); n > 2 {
			t.Errorf("%s: dialled %d times; a refused secret is not retried", call.name, n)
		}
		t.Logf("%s: %v", call.name, err)
	}
}

// A client that holds no secret at all (client.DialUnix, a dialer that does
// no handshake) against a daemon that wants one gets ErrUnauthenticated
// too: the refusal line arrives where HTTP/2 expected its first frame, and
// must not read as a broken stream, which would say the sandbox is lost.
func TestNoSecretIsUnauthenticatedNotLost(t *testing.T) {
	socket := refusingDaemon(t)
	c := client.DialUnix(socket, client.WithSandboxName("sb"))
	defer c.Close()
	ctx := testCtx(t)
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"info", func() error { _, err := c.Info(ctx); return err }},
		{"exec", func() error { _, err := c.Exec(ctx, "true"); return err }},
	} {
		err := call.do()
		if !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) || ctx.Err() != nil {
			t.Errorf("%s without a secret: %v; want runbox.ErrUnauthenticated", call.name, err)
		}
	}
}

// refusingDaemon listens on a fresh socket behind daemonauth with a secret
// no client of the test holds, so every connection is refused (on its first
// read), and returns the socket's path.
func refusingDaemon(t *testing.T) string {
	t.Helper()
	secret, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "auth.sock")
	inner, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := daemonauth.ParseSum(daemonauth.Sum(secret))
	if err != nil {
		t.Fatal(err)
	}
	ln := daemonauth.Listen(inner, sum, nil)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }() // the first read refuses
		}
	}()
	return socket
}
