package daemonauth

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// server is a listener wrapped by Listen, serving each connection in its
// own goroutine as net/http does: it echoes what it reads. read counts the
// bytes the raw connections gave the server, handshake included.
type server struct {
	socket string
	read   atomic.Int64
	served chan error // each connection's end
}

func startServer(t *testing.T, secret []byte) *server {
	return startServerTimeout(t, secret, Timeout)
}

func startServerTimeout(t *testing.T, secret []byte, timeout time.Duration) *server {
	t.Helper()
	s := &server{socket: filepath.Join(t.TempDir(), "s.sock"), served: make(chan error, 16)}
	inner, err := net.Listen("unix", s.socket)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := ParseSum(Sum(secret))
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(countingListener{inner, &s.read}, sum, nil, timeout)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, err := io.Copy(c, c)
				s.served <- err
			}()
		}
	}()
	return s
}

func (s *server) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", s.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func mustSecret(t *testing.T) []byte {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// echo checks that c carries bytes both ways once authenticated.
func echo(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
		t.Fatalf("echo: %q, %v", b, err)
	}
}

func TestRightSecretServes(t *testing.T) {
	secret := mustSecret(t)
	s := startServer(t, secret)
	c := s.dial(t)
	c, err := Handshake(context.Background(), c, secret)
	if err != nil {
		t.Fatalf("handshake with the right secret: %v", err)
	}
	echo(t, c)
}

func TestWrongSecretRefused(t *testing.T) {
	s := startServer(t, mustSecret(t))
	c := s.dial(t)
	_, err := Handshake(context.Background(), c, mustSecret(t))
	if !errors.Is(err, runbox.ErrUnauthenticated) || !strings.Contains(err.Error(), "wrong secret") {
		t.Fatalf("handshake with a wrong secret: %v; want runbox.ErrUnauthenticated saying wrong secret", err)
	}
	if err := <-s.served; !errors.Is(err, runbox.ErrUnauthenticated) {
		t.Errorf("the server's side of a refused connection ended with %v; want runbox.ErrUnauthenticated", err)
	}
	// The server closed the connection: nothing more is read from it.
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("read after a refusal: %d bytes, %v; want end of stream", n, err)
	}
}

// A peer that sends nothing holds only its own connection: another
// connection is accepted and served while it is still open.
func TestSilentPeerBlocksNoOne(t *testing.T) {
	secret := mustSecret(t)
	s := startServer(t, secret)
	s.dial(t) // sends nothing, and stays open until the test ends
	for range 3 {
		c := s.dial(t)
		c, err := Handshake(context.Background(), c, secret)
		if err != nil {
			t.Fatalf("handshake beside a silent peer: %v", err)
		}
		echo(t, c)
		c.Close()
		if err := <-s.served; err != nil {
			t.Fatalf("served: %v", err)
		}
	}
	select {
	case err := <-s.served:
		t.Fatalf("the silent connection ended (%v) before its handshake bound", err)
	default:
	}
}

// A peer that sends nothing is cut off after the handshake bound, and told
// why.
func TestSilentPeerCutOff(t *testing.T) {
	s := startServerTimeout(t, mustSecret(t), 200*time.Millisecond)
	c := s.dial(t)
	c.SetReadDeadline(time.Now().Add(time.Minute))
	b, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(b), "RUNBOXD-AUTH REFUSED no secret within") {
		t.Fatalf("a silent peer read %q, %v; want the refusal, then end of stream", b, err)
	}
}

func TestGarbageRefused(t *testing.T) {
	s := startServer(t, mustSecret(t))
	for _, tc := range []struct{ send, want string }{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "RUNBOXD-AUTH REFUSED no secret:"},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "RUNBOXD-AUTH REFUSED no secret:"},
		{"RUNBOXD-AUTH 2 " + strings.Repeat("0", 65), "RUNBOXD-AUTH REFUSED no secret:"},
		{"RUNBOXD-AUTH 1 " + strings.Repeat("zz", SecretSize) + "\n", "RUNBOXD-AUTH REFUSED malformed secret"},
		{"RUNBOXD-AUTH 1 " + strings.Repeat("00", SecretSize) + "X", "RUNBOXD-AUTH REFUSED malformed secret"},
		{"RUNBOXD-AUTH 1 " + strings.Repeat("00", SecretSize) + "\n", "RUNBOXD-AUTH REFUSED wrong secret"},
	} {
		c := s.dial(t)
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.WriteString(c, tc.send); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(b), tc.want) {
			t.Errorf("sent %q: read %q, %v; want %q, then end of stream", tc.send, b, err, tc.want)
		}
		if err := <-s.served; !errors.Is(err, runbox.ErrUnauthenticated) {
			t.Errorf("sent %q: the server's side ended with %v; want runbox.ErrUnauthenticated", tc.send, err)
		}
	}
}

// A peer that sends far more than a preamble costs the server one
// preamble's read: it is refused once the fixed-length preamble is in.
func TestLargePreambleBounded(t *testing.T) {
	s := startServer(t, mustSecret(t))
	c := s.dial(t)
	c.SetDeadline(time.Now().Add(time.Minute))
	go func() {
		// Fails once the server closes the connection.
		io.WriteString(c, "RUNBOXD-AUTH 1 "+strings.Repeat("a", 16<<20))
	}()
	line, _, err := readLine(c)
	if err != nil || !strings.HasPrefix(line, "RUNBOXD-AUTH REFUSED malformed secret") {
		t.Fatalf("read %q, %v; want the refusal", line, err)
	}
	if err := <-s.served; !errors.Is(err, runbox.ErrUnauthenticated) {
		t.Errorf("the server's side ended with %v; want runbox.ErrUnauthenticated", err)
	}
	if n := s.read.Load(); n > int64(preambleLen) {
		t.Errorf("the server read %d bytes of a 16 MiB preamble; want at most %d", n, preambleLen)
	}
}

// The client's handshake ends with its context, however silent the peer.
func TestHandshakeBoundedByContext(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, b) // reads the preamble, never answers
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Handshake(ctx, a, mustSecret(t))
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("handshake with a silent peer after cancel: %v; want context.Canceled", err)
	}
}

func TestDialerClosesRefused(t *testing.T) {
	s := startServer(t, mustSecret(t))
	var conn net.Conn
	dial := Dialer(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", s.socket)
		conn = c
		return c, err
	}, mustSecret(t))
	if c, err := dial(context.Background()); !errors.Is(err, runbox.ErrUnauthenticated) || c != nil {
		t.Fatalf("dial with a wrong secret: %v, %v", c, err)
	}
	if _, err := conn.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the refused connection is still open: write: %v", err)
	}
}

func TestParseSum(t *testing.T) {
	secret := mustSecret(t)
	if _, err := ParseSum(Sum(secret)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("g", 64), strings.Repeat("0", 66)} {
		if _, err := ParseSum(bad); err == nil {
			t.Errorf("ParseSum(%q) accepted", bad)
		}
	}
}

// BenchmarkConnection is what authentication adds to a new connection: a
// unix socket dial and one echoed byte, without and with the handshake.
func BenchmarkConnection(b *testing.B) {
	secret, err := NewSecret()
	if err != nil {
		b.Fatal(err)
	}
	sum, _ := ParseSum(Sum(secret))
	for _, auth := range []bool{false, true} {
		name := "plain"
		if auth {
			name = "authenticated"
		}
		b.Run(name, func(b *testing.B) {
			socket := filepath.Join(b.TempDir(), "s.sock")
			ln, err := net.Listen("unix", socket)
			if err != nil {
				b.Fatal(err)
			}
			if auth {
				ln = Listen(ln, sum, nil)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { io.Copy(c, c); c.Close() }()
				}
			}()
			buf := make([]byte, 1)
			for b.Loop() {
				c, err := net.Dial("unix", socket)
				if err != nil {
					b.Fatal(err)
				}
				if auth {
					if c, err = Handshake(context.Background(), c, secret); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// TestRefusalsLogRateLimited: a peer that retries a wrong secret in a loop
// gets one log line per refusalLogEvery, not one per attempt, and the next
// line counts what was left out.
func TestRefusalsLogRateLimited(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil)
	r := &refusalLog{log: slog.New(h)}
	for range 1000 {
		r.refused(errRefused)
	}
	r.mu.Lock()
	r.last = r.last.Add(-refusalLogEvery) // as if a second had passed
	r.mu.Unlock()
	r.refused(errRefused)
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "refused_unlogged_before=999") {
		t.Errorf("1001 refusals logged as %d lines:\n%s", len(lines), buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// readCountingConn counts the reads made on a connection.
type readCountingConn struct {
	net.Conn
	reads atomic.Int64
}

func (c *readCountingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// The client reads the daemon's answer in one read, not one per byte, and
// what the daemon sent after it in the same write (its first HTTP/2 frame)
// is still read from the connection Handshake returns. (Before: one read(2)
// per byte of "RUNBOXD-AUTH OK\n", 16 system calls on every connection.)
func TestAnswerReadAtOnceAndBytesAfterItKept(t *testing.T) {
	secret := mustSecret(t)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		pre := make([]byte, preambleLen)
		if _, err := io.ReadFull(b, pre); err != nil {
			return
		}
		io.WriteString(b, okLine+"FRAME")
		io.WriteString(b, "MORE")
	}()
	cc := &readCountingConn{Conn: a}
	c, err := Handshake(context.Background(), cc, secret)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if n := cc.reads.Load(); n != 1 {
		t.Errorf("the handshake made %d reads for a %d-byte answer that arrived in one write; want 1", n, len(okLine))
	}
	got := make([]byte, len("FRAMEMORE"))
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "FRAMEMORE" {
		t.Fatalf("read after the handshake: %q, %v; want the bytes the daemon sent after its answer, \"FRAMEMORE\"", got, err)
	}
}
