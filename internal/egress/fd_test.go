package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/fdpass"
)

// countingServer listens on ip and, per connection, reads to EOF, answers
// "got N" and closes: a half-close must reach it for it to answer at all.
func countingServer(t testing.TB, ip string) string {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("no %s: %v", ip, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "got %d", n)
			}()
		}
	}()
	return ln.Addr().String()
}

// halfClose writes msg on c, half-closes it and returns all it reads up to
// EOF.
func halfClose(t testing.TB, c net.Conn, r io.Reader, msg string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading to EOF: %v", err)
	}
	return string(b)
}

// connectTo opens a CONNECT tunnel through the rig's proxy.
func connectTo(t testing.TB, r *rig, target string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", r.httpProxy)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	return c, br
}

// forwarder listens on the test's loopback and forwards each connection to
// addr over the rig, passing fds or not.
func forwarder(t testing.TB, r *rig, addr string, fds bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, ps, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(ps, &p)
	fc, closeIdle := NewForwardClient(r.dial)
	fw := &FDForwarder{Dial: r.dial}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if fds {
				go fw.Forward(context.Background(), p, conn)
			} else {
				go ForwardConn(context.Background(), fc, p, conn)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; closeIdle(); fw.Close() })
	return ln.Addr().String()
}

// TestHalfCloseThroughSplice: a command's CloseWrite reaches the remote
// end through the proxy and port-forward (the server answers only at EOF),
// and the remote's close reaches the command as EOF.
func TestHalfCloseThroughSplice(t *testing.T) { bothModes(t, testHalfCloseThroughSplice) }

func testHalfCloseThroughSplice(t *testing.T, fds bool) {
	r := newRig(t, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	remote := countingServer(t, "127.0.0.2")
	_, p, _ := net.SplitHostPort(remote)
	c, br := connectTo(t, r, "allowed.test:"+p)
	defer c.Close()
	if got := halfClose(t, c, br, "twelve bytes"); got != "got 12" {
		t.Fatalf("through the proxy: %q, want got 12", got)
	}
	fwd := forwarder(t, r, countingServer(t, "127.0.0.1"), fds)
	fc, err := net.Dial("tcp", fwd)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if got := halfClose(t, fc, fc, "seven b"); got != "got 7" {
		t.Fatalf("through port-forward: %q, want got 7", got)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settle waits for the count f returns to come back to want (closes and
// goroutine exits after a connection ends are asynchronous), and returns
// the last count.
func settle(f func() int, want int) int {
	n := f()
	for i := 0; i < 3000 && n > want; i++ {
		time.Sleep(10 * time.Millisecond)
		n = f()
	}
	return n
}

// TestNoLeakAfter200Connections: 200 connections through the proxy and 200
// through port-forward, passing fds, leave no goroutine and no descriptor
// behind.
func TestNoLeakAfter200Connections(t *testing.T) {
	r := newRig(t, testNames, true)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	remote := countingServer(t, "127.0.0.2")
	_, p, _ := net.SplitHostPort(remote)
	fwd := forwarder(t, r, countingServer(t, "127.0.0.1"), true)
	// One of each first: lazily started parts (the HTTP/2 client, the
	// forwarder's listener loop) are there before the counts are taken.
	one := func() {
		c, br := connectTo(t, r, "allowed.test:"+p)
		if got := halfClose(t, c, br, "x"); got != "got 1" {
			t.Fatalf("proxy: %q", got)
		}
		c.Close()
		fc, err := net.Dial("tcp", fwd)
		if err != nil {
			t.Fatal(err)
		}
		if got := halfClose(t, fc, fc, "yy"); got != "got 2" {
			t.Fatalf("forward: %q", got)
		}
		fc.Close()
	}
	one()
	goroutines, fdsBefore := runtime.NumGoroutine(), openFDs(t)
	for range 200 {
		one()
	}
	if n := settle(runtime.NumGoroutine, goroutines); n > goroutines {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after 200 connections each way, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
	if n := settle(func() int { return openFDs(t) }, fdsBefore); n > fdsBefore {
		t.Fatalf("%d descriptors open after 200 connections each way, %d before", n, fdsBefore)
	}
}

// TestHostRefusesHostileHandOver: a runboxd (here a fake one) that hands
// over a descriptor of another kind than a connected TCP socket gets that
// connection refused with a logged reason, before any policy decision or
// dial; the descriptor is closed, and the host side goes on serving.
func TestHostRefusesHostileHandOver(t *testing.T) {
	kinds := map[string]func(t *testing.T) (int, func()){
		"dir": func(t *testing.T) (int, func()) {
			f, err := os.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return int(f.Fd()), func() { f.Close() }
		},
		"file": func(t *testing.T) (int, func()) {
			f, err := os.CreateTemp(t.TempDir(), "x")
			if err != nil {
				t.Fatal(err)
			}
			return int(f.Fd()), func() { f.Close() }
		},
		"pipe": func(t *testing.T) (int, func()) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			return int(r.Fd()), func() { r.Close(); w.Close() }
		},
		"unix socketpair": func(t *testing.T) (int, func()) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			return fds[0], func() { unix.Close(fds[0]); unix.Close(fds[1]) }
		},
	}
	for kind, mk := range kinds { // map order: a fresh order each run
		t.Run(kind, func(t *testing.T) {
			remote := countingServer(t, "127.0.0.2")
			_, ps, _ := net.SplitHostPort(remote)
			var port int
			fmt.Sscan(ps, &port)
			sock := filepath.Join(t.TempDir(), "d.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			handedOver := make(chan struct{})
			d := fdpass.Divert(ln, func(service string, c net.Conn) {
				defer c.Close()
				uc, _ := fdpass.UnixConn(c)
				fc := fdpass.New(uc)
				sendMsg(fc, fdMsg{Kind: "hello"}, nil)
				fd, cleanup := mk(t)
				b, _ := jsonMsg(fdMsg{Kind: "offer", ID: 1, Host: "allowed.test", Port: port, Via: "connect"})
				fc.Send(b, fd)
				cleanup()
				close(handedOver)
				io.Copy(io.Discard, c) // until the host side goes
			})
			defer d.Close()
			logs := &syncBuf{}
			h := &Host{
				Dial: func(ctx context.Context) (net.Conn, error) {
					var dd net.Dialer
					return dd.DialContext(ctx, "unix", sock)
				},
				Policy:   func() (Policy, error) { return Policy{Allow: []string{"allowed.test"}}, nil },
				Resolver: testNames,
				Log:      slog.New(slog.NewTextHandler(logs, nil)),
				PassFDs:  true,
			}
			before := openFDs(t)
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- h.Serve(ctx, nil) }()
			<-handedOver
			want := "runboxd's hand-over: fd refused"
			for i := 0; i < 3000 && !strings.Contains(logs.String(), want); i++ {
				time.Sleep(10 * time.Millisecond)
			}
			if !strings.Contains(logs.String(), want) {
				t.Fatalf("no refusal logged for a %s: %s", kind, logs.String())
			}
			t.Logf("logged: %s", strings.TrimSpace(logs.String()))
			// The host side still serves (its connection to runboxd, and
			// the fake runboxd's end of it, and nothing else open): the
			// hostile descriptor is closed, and nothing was dialled.
			if n := settle(func() int { return openFDs(t) }, before+2); n > before+2 {
				t.Fatalf("%d descriptors open, %d before the host side started (+2: its connection to runboxd, both ends)", n, before)
			}
			cancel()
			<-served
		})
	}
}

// TestForwardRefusesHostileSocket: a runboxd (a fake one) that answers a
// forward request with a pipe instead of a connected TCP socket gets the
// forwarded connection refused with ErrHostileFD; the pipe is closed and
// the caller's connection too.
func TestForwardRefusesHostileSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	d := fdpass.Divert(ln, func(service string, c net.Conn) {
		defer c.Close()
		uc, _ := fdpass.UnixConn(c)
		fc := fdpass.New(uc)
		m, _, err := recvMsg(fc)
		if err != nil || service != FDForward {
			t.Errorf("request %+v %v for %q", m, err, service)
			return
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Error(err)
			return
		}
		b, _ := jsonMsg(fdMsg{Kind: "forwarded", ID: m.ID})
		fc.Send(b, int(r.Fd()))
		r.Close()
		w.Close()
		io.Copy(io.Discard, c)
	})
	defer d.Close()
	dial := func(ctx context.Context) (net.Conn, error) {
		var dd net.Dialer
		return dd.DialContext(ctx, "unix", sock)
	}
	a, b := net.Pipe()
	defer b.Close()
	before := openFDs(t)
	fw := &FDForwarder{Dial: dial}
	err = fw.Forward(context.Background(), 8080, a)
	if !errors.Is(err, fdpass.ErrHostileFD) {
		t.Fatalf("Forward = %v, want ErrHostileFD", err)
	}
	t.Logf("refused: %v", err)
	fw.Close()
	if n := settle(func() int { return openFDs(t) }, before); n > before {
		t.Fatalf("%d descriptors open, %d before", n, before)
	}
	if _, err := b.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the caller's connection after a refusal: %v, want it closed", err)
	}
}

// TestForwardConcurrentConnections: many port-forward connections at once
// share the forwarder's one kept connection to runboxd (fd mode) or its
// RPC client; each gets its own answer, none is crossed or lost (the
// forwarder's waiting map, under -race in CI).
func TestForwardConcurrentConnections(t *testing.T) {
	bothModes(t, func(t *testing.T, fds bool) {
		r := newRig(t, testNames, fds)
		fwd := forwarder(t, r, countingServer(t, "127.0.0.1"), fds)
		const conns = 32
		errs := make(chan error, conns)
		var wg sync.WaitGroup
		for i := range conns {
			wg.Go(func() {
				msg := strings.Repeat("z", i+1) // each connection's own length
				c, err := net.Dial("tcp", fwd)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.WriteString(c, msg); err != nil {
					errs <- err
					return
				}
				if err := c.(*net.TCPConn).CloseWrite(); err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(c)
				if want := fmt.Sprintf("got %d", len(msg)); err != nil || string(b) != want {
					errs <- fmt.Errorf("connection %d: %q, %v; want %q", i, b, err, want)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
