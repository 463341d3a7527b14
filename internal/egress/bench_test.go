package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// byteServer listens on 127.0.0.2 and, per connection, writes n bytes and
// closes.
func byteServer(b *testing.B, n int) string {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Skipf("no 127.0.0.2: %v", err)
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

func benchRig(b *testing.B) *rig {
	r := newRig(b, testNames)
	r.policy.Store(&Policy{Allow: []string{"allowed.test"}, AllowCIDR: []string{"127.0.0.2/32"}})
	return r
}

// BenchmarkConnect: connection set-up and a 1-byte answer, direct and
// through the proxy (CONNECT, decided and dialled by the host side).
func BenchmarkConnect(b *testing.B) {
	addr := byteServer(b, 1)
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
	b.Run("proxy", func(b *testing.B) {
		r := benchRig(b)
		for b.Loop() {
			c, br := connectVia(b, r.httpProxy, "allowed.test:"+port)
			if _, err := io.ReadFull(br, make([]byte, 1)); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

// BenchmarkBulk: 64 MiB from the remote end to the command, direct and
// through the proxy.
func BenchmarkBulk(b *testing.B) {
	const n = 64 << 20
	addr := byteServer(b, n)
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
	b.Run("proxy", func(b *testing.B) {
		r := benchRig(b)
		b.SetBytes(n)
		for b.Loop() {
			c, br := connectVia(b, r.httpProxy, "allowed.test:"+port)
			drain(b, br)
			c.Close()
		}
	})
}
