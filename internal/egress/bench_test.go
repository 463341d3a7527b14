package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// byteServer listens on ip (127.0.0.2: a remote end; 127.0.0.1: a server
// in the sandbox, for port-forward) and, per connection, writes n bytes
// and closes.
func byteServer(b *testing.B, ip string, n int) string {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		b.Skipf("no %s: %v", ip, err)
	}
	b.Cleanup(func() { ln.Close() })
	buf := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for left := n; left > 0; {
					k, err := c.Write(buf[:min(left, len(buf))])
					if err != nil {
						return
					}
					left -= k
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// connectVia opens a CONNECT tunnel to target through proxy.
func connectVia(b *testing.B, proxy, target string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReaderSize(c, 256<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	return c, br
}

func benchRig(b *testing.B, fds bool) *rig {
	r := newRig(b, testNames, fds)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}})
	return r
}

// forwardTo listens on the caller's loopback and carries each connection
// over the rig's ForwardService to port on the "sandbox's" loopback, as
// runbox port-forward does; it returns the listener's address.
func forwardTo(b *testing.B, r *rig, addr string, fds bool) string {
	_, ps, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(ps, &p)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	c, closeIdle := NewForwardClient(r.dial)
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
				go ForwardConn(context.Background(), c, p, conn)
			}
		}
	}()
	b.Cleanup(func() { ln.Close(); <-done; closeIdle(); fw.Close() })
	return ln.Addr().String()
}

// dialRead dials addr and reads n bytes.
func dialRead(b *testing.B, addr string, n int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	got, err := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
	if err != nil || got != int64(n) {
		b.Fatalf("read %d of %d: %v", got, n, err)
	}
}

// modes are the two ways bytes travel: over EgressService and
// ForwardService ("rpc", the remote sandboxes' way), and as passed sockets
// the kernel splices ("fd", where runboxd shares the kernel).
var modes = []struct {
	suffix string
	fds    bool
}{{"-rpc", false}, {"-fd", true}}

// BenchmarkConnect: connection set-up and a 1-byte answer, direct,
// through the proxy (CONNECT, decided and dialled by the host side) and
// through port-forward (the other way: the caller to a server in the
// sandbox).
func BenchmarkConnect(b *testing.B) {
	addr := byteServer(b, "127.0.0.2", 1)
	_, port, _ := net.SplitHostPort(addr)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			io.ReadFull(c, make([]byte, 1))
			c.Close()
		}
	})
	for _, m := range modes {
		b.Run("proxy"+m.suffix, func(b *testing.B) {
			r := benchRig(b, m.fds)
			for b.Loop() {
				c, br := connectVia(b, r.httpProxy, "allowed.test:"+port)
				if _, err := io.ReadFull(br, make([]byte, 1)); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
		b.Run("forward"+m.suffix, func(b *testing.B) {
			fwd := forwardTo(b, benchRig(b, m.fds), byteServer(b, "127.0.0.1", 1), m.fds)
			for b.Loop() {
				dialRead(b, fwd, 1)
			}
		})
	}
}

// BenchmarkBulk: 64 MiB from the remote end to the command, direct,
// through the proxy and through port-forward (a server in the sandbox to
// the caller).
func BenchmarkBulk(b *testing.B) {
	const n = 64 << 20
	addr := byteServer(b, "127.0.0.2", n)
	_, port, _ := net.SplitHostPort(addr)
	drain := func(b *testing.B, r io.Reader) {
		got, err := io.CopyBuffer(io.Discard, r, make([]byte, 256<<10))
		if err != nil || got != n {
			b.Fatalf("read %d of %d: %v", got, n, err)
		}
	}
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(n)
		for b.Loop() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			drain(b, c)
			c.Close()
		}
	})
	for _, m := range modes {
		b.Run("proxy"+m.suffix, func(b *testing.B) {
			r := benchRig(b, m.fds)
			b.SetBytes(n)
			for b.Loop() {
				c, br := connectVia(b, r.httpProxy, "allowed.test:"+port)
				drain(b, br)
				c.Close()
			}
		})
		b.Run("forward"+m.suffix, func(b *testing.B) {
			fwd := forwardTo(b, benchRig(b, m.fds), byteServer(b, "127.0.0.1", n), m.fds)
			b.SetBytes(n)
			for b.Loop() {
				dialRead(b, fwd, n)
			}
		})
	}
}
