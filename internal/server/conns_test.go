package server_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/server"
	"github.com/runbox/runbox/provider/host"
)

// TestConnectionCapAndIdle: of many raw connections from one IP the server
// holds at most MaxConnsPerIP (the rest are closed at once), and idle
// keep-alive connections are closed after IdleTimeout.
func TestConnectionCapAndIdle(t *testing.T) {
	home := t.TempDir()
	store, err := registry.Open(context.Background(), filepath.Join(home, "runbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := server.New(server.Config{Store: store, DefaultProvider: "host", WorkspaceDir: home + "/ws",
		Providers: map[string]runbox.Provider{"host": &host.Provider{Home: home}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	const max = 20
	go func() {
		done <- srv.Serve(ctx, ln, server.ServeOptions{IdleTimeout: 300 * time.Millisecond, MaxConnsPerIP: max, ShutdownTimeout: time.Second})
	}()
	defer func() { cancel(); <-done; os.RemoveAll(home + "/ws") }()
	waitReady(t, "http://"+ln.Addr().String())

	var conns []net.Conn
	closed := make(chan int, 3*max)
	for i := range 3 * max {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		if i > 0 { // the first is read below
			go func() { io.Copy(io.Discard, c); closed <- i }()
		}
	}
	// The ones over the cap are closed at once (well before any timeout).
	for range 2 * max {
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatalf("fewer than %d connections over the cap were closed; held: %d", 2*max, srv.OpenConns())
		}
	}
	if n := srv.OpenConns(); n > max {
		t.Fatalf("server holds %d connections, cap %d", n, max)
	}
	// The ones within the cap are served, the first of them by a request
	// now; after it goes idle (keep-alive), the server closes it.
	k := conns[0]
	if _, err := io.WriteString(k, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(k), nil)
	if err != nil {
		t.Fatalf("a connection within the cap: %v", err)
	}
	resp.Body.Close()
	for deadline := time.Now().Add(time.Minute); srv.OpenConns() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("idle connections not closed: %d held", srv.OpenConns())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
