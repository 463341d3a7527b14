package server_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/server"
	"github.com/runbox/runbox/provider/host"
)

// TestMain builds runboxd once, exports it as $RUNBOX_RUNBOXD, and checks
// for leaked goroutines at the end.
func TestMain(m *testing.M) { providertest.Main(m) }

// testServer is an in-process server on a loopback port, with the host
// provider, a fresh home and a fresh registry.
type testServer struct {
	url   string
	home  string
	store *registry.Store
	srv   *server.Server
	stop  func()
}

type serverConfig = server.Config

type serverOpt func(*serverConfig)

func startServer(t *testing.T, opts ...serverOpt) *testServer { return startServerTB(t, opts...) }

// startServerB is startServer for benchmarks.
func startServerB(b *testing.B, opts ...serverOpt) *testServer { return startServerTB(b, opts...) }

func startServerTB(t testing.TB, opts ...serverOpt) *testServer {
	t.Helper()
	home, err := os.MkdirTemp("", "rbs")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{home: home}
	ts.start(t, opts...)
	t.Cleanup(func() {
		ts.stop()
		removeAll(t, home)
		os.RemoveAll(home)
		os.RemoveAll(home + "-ws")
	})
	return ts
}

// start (re)starts the server on ts's home and registry.
func (ts *testServer) start(t testing.TB, opts ...serverOpt) {
	t.Helper()
	store, err := registry.Open(context.Background(), filepath.Join(ts.home, "runbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{
		Store:           store,
		Providers:       map[string]runbox.Provider{"host": &host.Provider{Home: ts.home}},
		DefaultProvider: "host",
		WorkspaceDir:    ts.home + "-ws",
		ReapInterval:    100 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv := server.New(cfg)
	addr := "127.0.0.1:0"
	if ts.url != "" { // a restart: the same address, so clients find it again
		addr = strings.TrimPrefix(ts.url, "http://")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, server.ServeOptions{ShutdownTimeout: 5 * time.Second}) }()
	ts.url, ts.store, ts.srv = "http://"+ln.Addr().String(), store, srv
	ts.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		store.Close()
	}
	waitReady(t, ts.url)
}

// removeAll removes every host sandbox left in home.
func removeAll(t testing.TB, home string) {
	p := &host.Provider{Home: home}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbs, _ := p.List(ctx)
	for _, sb := range sbs {
		if err := p.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("remove %s: %v", sb.ID, err)
		}
	}
}

// tokenB is token for benchmarks.
func (ts *testServer) tokenB(b *testing.B, tenant string) string { return ts.token(b, tenant) }

// token makes a token for tenant.
func (ts *testServer) token(t testing.TB, tenant string) string {
	t.Helper()
	_, tok, err := ts.store.CreateToken(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tenant returns a Server client for a fresh token of tenant.
func (ts *testServer) tenant(t *testing.T, name string) *client.Server {
	t.Helper()
	s, err := client.NewServer(ts.url, ts.token(t, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
