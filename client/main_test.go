package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/supervisor"
)

// The daemon runs in this test binary, with a real supervisor. The
// supervisor reaps every child of the process (wait4(-1)), so nothing in
// this package may use os/exec.

var testDaemon struct {
	once   sync.Once
	err    error
	socket string
	dir    string
	stop   context.CancelFunc
	served chan error
}

// socketPath starts the shared in-process daemon on first use and returns
// its socket.
func socketPath(t testing.TB) string {
	t.Helper()
	d := &testDaemon
	d.once.Do(func() {
		d.dir, d.err = os.MkdirTemp("", "runbox-client-test")
		if d.err != nil {
			return
		}
		sup, err := supervisor.New(supervisor.Config{Dir: d.dir, Version: "test"})
		if err != nil {
			d.err = err
			return
		}
		d.socket = filepath.Join(d.dir, "runboxd.sock")
		ln, err := daemon.Listen(d.socket)
		if err != nil {
			sup.Shutdown(context.Background(), 0)
			d.err = err
			return
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		ctx, cancel := context.WithCancel(context.Background())
		d.stop = cancel
		d.served = make(chan error, 1)
		go func() { d.served <- daemon.NewServer(sup, log).Serve(ctx, ln) }()
	})
	if d.err != nil {
		t.Fatalf("start daemon: %v", d.err)
	}
	return d.socket
}

func stopDaemon() error {
	d := &testDaemon
	if d.stop == nil {
		return nil
	}
	d.stop()
	err := <-d.served
	os.RemoveAll(d.dir)
	return err
}

// newClient returns a client of the shared daemon, closed with the test.
func newClient(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c := client.DialUnix(socketPath(t), opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx bounds a test's calls generously: a liveness bound, not a timing
// assertion.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type withTeardown struct{ m *testing.M }

func (w withTeardown) Run() int {
	code := w.m.Run()
	if err := stopDaemon(); err != nil {
		fmt.Fprintf(os.Stderr, "stop daemon: %v\n", err)
		code = 1
	}
	return code
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(withTeardown{m})
}

// dialCounting returns a dialer of the shared daemon that counts its dials
// and closes the first connection after closeFirstAfter.
func dialCounting(t *testing.T, closeFirstAfter time.Duration) (dial func(context.Context) (net.Conn, error), dials func() int) {
	socket := socketPath(t)
	var mu sync.Mutex
	n := 0
	var timers []*time.Timer
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, tm := range timers {
			tm.Stop()
		}
	})
	dial = func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		if n == 1 {
			timers = append(timers, time.AfterFunc(closeFirstAfter, func() { conn.Close() }))
		}
		return conn, nil
	}
	dials = func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	return dial, dials
}
