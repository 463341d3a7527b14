package fdpass

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Preface opens a connection that wants fd passing; the service name and a
// newline follow it.
const Preface = "RUNBOX-FD/1 "

// MaxFrame bounds a frame's payload: frames are small requests and
// answers, never bulk bytes.
const MaxFrame = 64 << 10

// maxServiceName bounds the preface line's service name.
const maxServiceName = 32

// prefaceTimeout bounds how long a connection that started like the
// preface may take to finish its preface line.
const prefaceTimeout = 10 * time.Second

// ErrHostileFD means the peer sent a descriptor that breaks the protocol:
// more than one in a frame, one where none was announced, or one that is
// not a connected TCP socket. It was closed.
var ErrHostileFD = errors.New("fd refused")

// Divert returns ln without the connections that open with Preface: each
// of those goes to handle, in a goroutine of its own, with the service it
// named. A connection's first bytes are read in a goroutine of its own
// too, so a peer that sends nothing never holds Accept. Closing the
// returned listener closes ln.
func Divert(ln net.Listener, handle func(service string, c net.Conn)) net.Listener {
	d := &diverter{Listener: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go d.loop(handle)
	return d
}

type diverter struct {
	net.Listener
	conns    chan net.Conn
	err      error // Accept's error, once done is closed
	done     chan struct{}
	closeOne sync.Once
}

func (d *diverter) loop(handle func(string, net.Conn)) {
	defer close(d.done)
	for {
		c, err := d.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			d.err = err
			return
		}
		go d.sniff(c, handle)
	}
}

// sniff reads as much of c as can still be the preface, then hands c on.
func (d *diverter) sniff(c net.Conn, handle func(string, net.Conn)) {
	var head []byte
	buf := make([]byte, len(Preface))
	for len(head) < len(Preface) {
		n, err := c.Read(buf[:len(Preface)-len(head)])
		head = append(head, buf[:n]...)
		if !strings.HasPrefix(Preface, string(head)) {
			break
		}
		if err != nil {
			c.Close()
			return
		}
	}
	if string(head) != Preface {
		select {
		case d.conns <- &prefixed{Conn: c, head: head}:
		case <-d.done:
			c.Close()
		}
		return
	}
	c.SetReadDeadline(time.Now().Add(prefaceTimeout))
	name, err := readLine(c, maxServiceName)
	if err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	handle(name, c)
}

// readLine reads up to a newline a byte at a time (nothing past it: the
// frames that follow may carry descriptors, for recvmsg to receive).
func readLine(r io.Reader, max int) (string, error) {
	var b [1]byte
	var line []byte
	for len(line) <= max {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", err
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
	return "", fmt.Errorf("preface line longer than %d bytes", max)
}

func (d *diverter) Accept() (net.Conn, error) {
	select {
	case c := <-d.conns:
		return c, nil
	case <-d.done:
		return nil, d.err
	}
}

func (d *diverter) Close() error {
	err := d.Listener.Close()
	<-d.done
	return err
}

// prefixed is a connection whose first bytes were read already.
type prefixed struct {
	net.Conn
	head []byte
}

func (c *prefixed) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// NetConn returns the connection under c once its first bytes have been
// read again (before, reading it would lose them): a writer may write to
// it straight, as c writes what it is given unchanged.
func (c *prefixed) NetConn() net.Conn {
	if len(c.head) > 0 {
		return nil
	}
	return c.Conn
}

// UnixConn returns the unix socket under c (through wrappers that have a
// NetConn method, as an authenticated connection does), or an error when c
// is not one: fds travel only over a unix socket on this kernel.
func UnixConn(c net.Conn) (*net.UnixConn, error) {
	for range 8 {
		switch x := c.(type) {
		case *net.UnixConn:
			return x, nil
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil, fmt.Errorf("fd passing needs a unix socket, not a %T", c)
		}
	}
	return nil, fmt.Errorf("fd passing: %T wraps too deep", c)
}

// Open asks the runboxd at the other end of c (a fresh authenticated
// connection, nothing read from it yet) for service and returns the frame
// connection; it closes c on error. The caller's first Recv reads
// runboxd's answer: a runboxd that does not pass fds answers HTTP, which
// fails that Recv.
func Open(c net.Conn, service string) (*Conn, error) {
	uc, err := UnixConn(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.WriteString(uc, Preface+service+"\n"); err != nil {
		c.Close()
		return nil, fmt.Errorf("fd passing: %w", err)
	}
	return New(uc), nil
}

// Dial opens an fd-passing connection for service with dial; see Open.
func Dial(ctx context.Context, dial func(context.Context) (net.Conn, error), service string) (*Conn, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	return Open(c, service)
}

// Handshake errors are wrapped by the caller; a frame that does not parse
// says the peer is not speaking this protocol.
var errNotFrames = errors.New("the peer does not speak runbox's fd-passing frames (a runboxd that does not pass sockets answers HTTP)")

// looksHTTP says whether a frame header is really the start of an HTTP
// answer.
func looksHTTP(hdr []byte) bool { return bytes.HasPrefix(hdr, []byte("HTTP/")) }

// errEOF is a peer that closed between frames or inside one.
var errEOF = errors.New("connection closed")
