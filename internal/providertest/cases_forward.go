package providertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/egress"
)

// forwardBytes is how much the forward case sends each way on one
// connection: several HTTP/2 windows and many splice chunks.
const forwardBytes = 4 << 20

// forwardServer is the forward case's server in the sandbox, run as
// python3 -c forwardServer PORT MARKER READY: it forks a handler per
// connection (its command line carries MARKER, so the handlers are
// counted), and the connection's first byte picks what the handler does.
// "e" echoes every byte until the caller half-closes, then sends the
// hex sha256 of what it read and a newline, and closes: both directions
// and the half-close. "s" sends until its peer goes away: it ends only
// when runboxd closes the sandbox's end of the connection.
const forwardServer = `
import hashlib, os, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(16)
open(sys.argv[3], "w").close()
while True:
    c, _ = ls.accept()
    if os.fork():
        c.close()
        continue
    ls.close()
    mode = c.recv(1)
    try:
        if mode == b"e":
            h = hashlib.sha256()
            while True:
                b = c.recv(65536)
                if not b:
                    break
                h.update(b)
                c.sendall(b)
            c.sendall(h.hexdigest().encode() + b"\n")
        elif mode == b"s":
            b = b"s" * 65536
            while True:
                c.sendall(b)
    except OSError:
        pass
    c.close()
    os._exit(0)
`

// testPortForward: a connection to a port on the sandbox's loopback,
// carried by the library runbox port-forward uses (egress.Ports) over the
// provider's own Dialer, by the road the CLI takes (socket passing where
// the provider says runboxd shares this kernel, ForwardService messages
// elsewhere) and, where that is socket passing, by messages too. Each road:
// several MiB both ways arrive exact (sha256), a half-close reaches the
// server and the answer after it comes back; a connection the caller
// drops ends the server's handler (runboxd closes its end: no process is
// left in the sandbox, counted); a port nobody listens on is an error, not
// a hang; and with the Fixture's DialMarker, the processes the provider's
// dial started in the sandbox end when the forwarding closes.
func testPortForward(t *testing.T, fx Fixture) {
	s := newToolsSandbox(t, fx)
	port, marker := s.startForwardServer(t)
	base := s.count(t, marker)
	roads := []bool{egress.PassesFDs(fx.Provider, s.sb)}
	if roads[0] {
		roads = append(roads, false)
	}
	for _, fd := range roads {
		name := "messages"
		if fd {
			name = "socket"
		}
		t.Run(name, func(t *testing.T) { s.forwardRoad(t, fd, port, marker, base) })
	}
}

// startForwardServer starts forwardServer in the sandbox on a free port
// and returns the port and its marker.
func (s *sandbox) startForwardServer(t *testing.T) (int, string) {
	t.Helper()
	marker := "runbox-forward-" + randDigits(12)
	ready := tempPath("forward-ready")
	for range 5 { // a random port may be taken
		port := randPort()
		res := s.exec(t, fmt.Sprintf(`python3 -c '%s' %d %s %s >/dev/null 2>&1 &
i=0; while [ ! -e %[4]s ] && [ $i -lt %[5]d ]; do sleep 0.1; i=$((i+1)); done
[ -e %[4]s ] && rm -f %[4]s && echo up`, forwardServer, port, marker, ready, int(readyBound/(100*time.Millisecond))))
		if res.OK() {
			return port, marker
		}
		t.Logf("forward server on port %d did not start: %s", port, describe(res))
	}
	t.Fatal("the forward server started on none of 5 random ports")
	return 0, ""
}

// forwardRoad runs the forward case's checks on one road.
func (s *sandbox) forwardRoad(t *testing.T, passFDs bool, port int, marker string, base int) {
	fx := s.fx
	dialBase := 0
	if fx.DialMarker != "" {
		dialBase = s.count(t, fx.DialMarker)
	}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	ports := egress.NewPorts(fx.Provider.Dialer(s.sb), passFDs)
	if ports.PassesFDs() != passFDs {
		t.Fatalf("egress.NewPorts(passFDs %v) passes FDs: %v", passFDs, ports.PassesFDs())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	forwarded := make(chan error, 8)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { forwarded <- ports.Forward(ctx, port, conn) }()
		}
	}()
	dial := func() *net.TCPConn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(caseTimeout)) // a hang fails, not hangs
		return c.(*net.TCPConn)
	}

	// Both ways, exact, and a half-close.
	payload := make([]byte, forwardBytes)
	rand.Read(payload)
	sum := sha256.Sum256(payload)
	c := dial()
	sent := make(chan error, 1)
	go func() {
		_, err := c.Write(append([]byte("e"), payload...))
		if err == nil {
			err = c.CloseWrite()
		}
		sent <- err
	}()
	got, err := io.ReadAll(c)
	c.Close()
	if err := <-sent; err != nil {
		t.Fatalf("send %d bytes and half-close: %v", len(payload), err)
	}
	if err != nil {
		t.Fatalf("read the echo: %v (after %d bytes)", err, len(got))
	}
	want := append(append([]byte(nil), payload...), hex.EncodeToString(sum[:])+"\n"...)
	if !bytes.Equal(got, want) {
		gs := sha256.Sum256(got)
		t.Errorf("echo: %d bytes (sha256 %x), want %d (sha256 of the payload %x, then the server's count of it); tail %q",
			len(got), gs, len(want), sum, got[max(0, len(got)-80):])
	}
	if err := <-forwarded; err != nil {
		t.Errorf("forward of the echo connection: %v", err)
	}
	if fx.DialMarker != "" {
		t.Logf("%d processes with %q in the sandbox while the forwarding is open, %d before it", s.count(t, fx.DialMarker), fx.DialMarker, dialBase)
	}

	// A dropped connection ends the server's handler: runboxd closes the
	// sandbox's end, so the handler's writes fail.
	c = dial()
	if _, err := c.Write([]byte("s")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1<<20)); err != nil {
		t.Fatalf("read from the sending handler: %v", err)
	}
	if n := s.count(t, marker); n != base+1 {
		t.Errorf("%d processes with %q while a connection is open, want %d: the listener and the handler", n, marker, base+1)
	}
	c.Close()
	if err := <-forwarded; err != nil {
		t.Errorf("forward of the dropped connection: %v", err)
	}
	if !poll(readyBound, func() bool { return s.count(t, marker) == base }) {
		t.Errorf("%d processes with %q %v after the caller dropped its connection, want %d (the listener): the handler still writes to runboxd's end",
			s.count(t, marker), marker, readyBound, base)
	}

	// A port nobody listens on: an error, not a hang.
	dead := randPort()
	for dead == port {
		dead = randPort()
	}
	ours, theirs := net.Pipe()
	defer theirs.Close()
	errc := make(chan error, 1)
	go func() { errc <- ports.Forward(ctx, dead, ours) }()
	select {
	case err := <-errc:
		switch {
		case err == nil:
			t.Errorf("forward to port %d, where nothing listens: no error", dead)
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			t.Errorf("forward to port %d, where nothing listens: %v; want runboxd's refusal, not the caller's deadline", dead, err)
		case !strings.Contains(err.Error(), fmt.Sprint(dead)):
			t.Errorf("forward to port %d: error %q does not name the port", dead, err)
		default:
			t.Logf("forward to port %d, where nothing listens: %v", dead, err)
		}
	case <-ctx.Done():
		t.Fatalf("forward to port %d, where nothing listens, still waits after %v", dead, caseTimeout)
	}
	theirs.SetDeadline(time.Now().Add(caseTimeout))
	if _, err := theirs.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the caller's connection after a refused forward: read %v, want it closed", err)
	}

	ln.Close()
	if err := ports.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if fx.DialMarker != "" && !poll(readyBound, func() bool { return s.count(t, fx.DialMarker) <= dialBase }) {
		t.Errorf("%d processes with %q in the sandbox %v after the forwarding closed, want at most the %d before it",
			s.count(t, fx.DialMarker), fx.DialMarker, readyBound, dialBase)
	}
}
