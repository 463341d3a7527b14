package fdpass

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// pair returns two frame connections on a unix socketpair.
func pair(t *testing.T) (*Conn, *Conn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return New(a), New(b), a
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // ReadDir's own
}

// hostile makes a descriptor of one kind a sandbox might send instead of a
// connected TCP socket; it returns it and what else to close.
func hostile(t *testing.T, kind string) (int, func()) {
	t.Helper()
	switch kind {
	case "dir":
		f, err := os.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return int(f.Fd()), func() { f.Close() }
	case "file":
		f, err := os.CreateTemp(t.TempDir(), "x")
		if err != nil {
			t.Fatal(err)
		}
		return int(f.Fd()), func() { f.Close() }
	case "pipe":
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		return int(r.Fd()), func() { r.Close(); w.Close() }
	case "unix socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fds[0], func() { unix.Close(fds[0]); unix.Close(fds[1]) }
	case "unconnected tcp":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fd, func() { unix.Close(fd) }
	case "udp":
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, _ := c.(*net.UDPConn).File()
		c.Close()
		return int(f.Fd()), func() { f.Close() }
	}
	t.Fatalf("kind %q", kind)
	return -1, nil
}

var hostileKinds = []string{"dir", "file", "pipe", "unix socketpair", "unconnected tcp", "udp"}

// TestHostileFDRefusedAndClosed: a descriptor of each hostile kind, in a
// random order, is refused by TCPConn and leaves no descriptor open here.
func TestHostileFDRefusedAndClosed(t *testing.T) {
	kinds := append([]string(nil), hostileKinds...)
	rand.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			send, recv, _ := pair(t)
			before := openFDs(t)
			fd, cleanup := hostile(t, kind)
			if err := send.Send([]byte("x"), fd); err != nil {
				t.Fatal(err)
			}
			cleanup() // the sender's copies: only the one in flight is left
			_, f, err := recv.Recv()
			if err != nil || f == nil {
				t.Fatalf("Recv: %v, fd %v", err, f)
			}
			if flags, _ := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); flags&unix.FD_CLOEXEC == 0 {
				t.Error("a received descriptor is not close-on-exec")
			}
			c, err := TCPConn(f)
			if c != nil || !errors.Is(err, ErrHostileFD) {
				t.Fatalf("TCPConn(%s) = %v, %v; want ErrHostileFD", kind, c, err)
			}
			t.Logf("refused: %v", err)
			if after := openFDs(t); after != before {
				t.Fatalf("%d descriptors open after, %d before", after, before)
			}
		})
	}
}

// TestManyFDsRefused: several descriptors with one frame, or one with a
// frame that announced none, or with a frame's later bytes, are all closed
// and the frame refused.
func TestManyFDsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		flag byte
	}{{"three announced as one", 3, flagFD}, {"one unannounced", 1, 0}, {"eight", oobFDs, flagFD}, {"more than fit", oobFDs + 4, flagFD}} {
		t.Run(tc.name, func(t *testing.T) {
			send, recv, raw := pair(t)
			_ = send
			before := openFDs(t)
			var fds []int
			var cleanups []func()
			for range tc.n {
				fd, c := hostile(t, hostileKinds[rand.IntN(len(hostileKinds))])
				fds = append(fds, fd)
				cleanups = append(cleanups, c)
			}
			b := make([]byte, headerLen+1)
			binary.BigEndian.PutUint32(b, 1)
			b[4] = tc.flag
			if _, _, err := raw.WriteMsgUnix(b, unix.UnixRights(fds...), nil); err != nil {
				t.Fatal(err)
			}
			for _, c := range cleanups {
				c()
			}
			_, f, err := recv.Recv()
			if f != nil || !errors.Is(err, ErrHostileFD) {
				t.Fatalf("Recv = %v, %v; want ErrHostileFD", f, err)
			}
			if after := openFDs(t); after != before {
				t.Fatalf("%d descriptors open after, %d before", after, before)
			}
		})
	}
}

// TestFDWithLaterBytesRefused: a descriptor sent with a frame's payload,
// not its first byte, is refused and closed.
func TestFDWithLaterBytesRefused(t *testing.T) {
	_, recv, raw := pair(t)
	before := openFDs(t)
	fd, cleanup := hostile(t, "pipe")
	hdr := make([]byte, headerLen)
	binary.BigEndian.PutUint32(hdr, 4)
	raw.Write(hdr)
	if _, _, err := raw.WriteMsgUnix([]byte("data"), unix.UnixRights(fd), nil); err != nil {
		t.Fatal(err)
	}
	cleanup()
	_, f, err := recv.Recv()
	if f != nil || !errors.Is(err, ErrHostileFD) {
		t.Fatalf("Recv = %v, %v; want ErrHostileFD", f, err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after, %d before", after, before)
	}
}

// TestConnectedTCPAccepted: a connected TCP socket passes and carries bytes.
func TestConnectedTCPAccepted(t *testing.T) {
	send, recv, _ := pair(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := send.SendConn([]byte("x"), c.(*net.TCPConn)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, f, err := recv.Recv()
	if err != nil || f == nil {
		t.Fatalf("Recv: %v %v", f, err)
	}
	tc, err := TCPConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	b := make([]byte, 2)
	if _, err := tc.Read(b); err != nil || string(b) != "hi" {
		t.Fatalf("read %q %v", b, err)
	}
}

// TestDivert: a connection opening with the preface goes to the handler
// with its service; any other reaches Accept with its bytes intact.
func TestDivert(t *testing.T) {
	ln, err := net.Listen("unix", t.TempDir()+"/s")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	d := Divert(ln, func(service string, c net.Conn) { got <- service; c.Close() })
	defer d.Close()
	c1, _ := net.Dial("unix", ln.Addr().String())
	defer c1.Close()
	c1.Write([]byte(Preface + "egress\n"))
	if s := <-got; s != "egress" {
		t.Fatalf("service %q", s)
	}
	c2, _ := net.Dial("unix", ln.Addr().String())
	defer c2.Close()
	c2.Write([]byte("RUNBOX-X"))
	a, err := d.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := make([]byte, 8)
	if _, err := a.Read(b); err != nil || string(b) != "RUNBOX-X" {
		t.Fatalf("passed through: %q %v", b, err)
	}
}
