package endpoint

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// echoUpstream is a stand-in runboxd: a unix socket that echoes each
// connection, counting them.
func echoUpstream(t *testing.T) (dial func(context.Context) (net.Conn, error), count *atomic.Int32) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "up.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	count = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			count.Add(1)
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}, count
}

// serve runs s in the background and returns when it says ready, with a
// channel giving Serve's error.
func serve(t *testing.T, s *Server) <-chan error {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.Ready = w
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if line != readyWord+"\n" {
		t.Fatalf("endpoint said %q; want ready", line)
	}
	return done
}

func echo(t *testing.T, sock, msg string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("through the endpoint: %q, %v; want %q", buf, err, msg)
	}
}

// TestServeCarriesThenIdles: bytes pass both ways, each connection is a
// fresh upstream one, a stale socket file is replaced, a second endpoint
// for the same socket defers to the first, and an idle endpoint exits and
// removes its socket.
func TestServeCarriesThenIdles(t *testing.T) {
	dial, count := echoUpstream(t)
	sock := filepath.Join(t.TempDir(), "endpoints", "ssh-0123456789ab.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	// A stale socket: a file nothing accepts on.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()

	s := &Server{Socket: sock, Idle: 300 * time.Millisecond, Dial: dial, Gone: func() bool { return false }}
	done := serve(t, s)
	echo(t, sock, "one")
	echo(t, sock, "two")
	if n := count.Load(); n != 2 {
		t.Errorf("upstream connections: %d; want 2", n)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("endpoint directory: %v %v; want 0700", fi.Mode(), err)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("endpoint socket: %v %v; want 0600", fi.Mode(), err)
	}

	second := serve(t, &Server{Socket: sock, Idle: time.Minute, Dial: dial, Gone: func() bool { return false }})
	if err := <-second; err != nil {
		t.Errorf("a second endpoint for the same socket: %v; want it to defer", err)
	}
	echo(t, sock, "three")

	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the endpoint did not exit when idle")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after the idle exit: %v", err)
	}
}

// TestServeBusyIsNotIdle: a connection open past the idle time keeps the
// endpoint; when the sandbox is gone the endpoint exits and closes it.
func TestServeBusyIsNotIdle(t *testing.T) {
	dial, _ := echoUpstream(t)
	sock := filepath.Join(t.TempDir(), "e", "ssh-0123456789ab.sock")
	var gone atomic.Bool
	done := serve(t, &Server{Socket: sock, Idle: 100 * time.Millisecond, Dial: dial, Gone: gone.Load})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "x")
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the endpoint exited with a connection open: %v", err)
	case <-time.After(500 * time.Millisecond): // several idle times
	}
	gone.Store(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the endpoint did not exit when its sandbox was gone")
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Read(b); err == nil {
		t.Error("the carried connection still open after the endpoint exited")
	}
}
