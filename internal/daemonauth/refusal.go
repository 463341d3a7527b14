package daemonauth

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/runbox/runbox"
)

// DetectRefusal wraps conn, a stream on which a client speaks HTTP/2 at
// once, so that a daemon's refusal line arriving where HTTP/2 frames were
// expected (a client that holds no secret: its dialer did no handshake) is
// read as an error wrapping runbox.ErrUnauthenticated, not as a malformed
// frame that would make the sandbox look lost. After a handshake the first
// bytes are HTTP/2's SETTINGS frame, which never starts like the line.
// onRefusal, if not nil, is told the error as soon as it is seen: an
// HTTP/2 transport may report a connection that failed while it was being
// set up with an error of its own that does not carry the cause.
func DetectRefusal(conn net.Conn, onRefusal func(error)) net.Conn {
	return &refusalConn{Conn: conn, onRefusal: onRefusal}
}

type refusalConn struct {
	net.Conn
	onRefusal func(error)
	once      sync.Once
	err       error
	refusal   bool   // err is the daemon's refusal
	head      []byte // bytes read while looking, still to be returned
}

// Write writes p; when that fails (the daemon refused and closed while the
// client was still sending its preface), the refusal it left in the
// socket's buffer is the error, where there is one.
func (c *refusalConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.Conn.SetReadDeadline(time.Now().Add(refusalReadBound))
		c.once.Do(c.look)
		if c.refusal {
			return n, c.err
		}
	}
	return n, err
}

// refusalReadBound bounds the look for a refusal after a failed write: a
// refusal is already in the buffer, or the peer is gone.
const refusalReadBound = time.Second

func (c *refusalConn) Read(p []byte) (int, error) {
	c.once.Do(c.look)
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// look reads the first bytes; when they start the refusal line, it reads
// the rest of the line (bounded) and keeps the refusal as the error.
func (c *refusalConn) look() {
	buf := make([]byte, maxStatusLine)
	n, err := c.Conn.Read(buf)
	buf = buf[:n]
	prefix := []byte("RUNBOXD-AUTH ")
	if !bytes.HasPrefix(buf, prefix) && !(len(buf) < len(prefix) && bytes.HasPrefix(prefix, buf) && n > 0) {
		c.head, c.err = buf, err
		return
	}
	for err == nil && !bytes.Contains(buf, []byte("\n")) && len(buf) < maxStatusLine {
		var m int
		more := make([]byte, maxStatusLine-len(buf))
		m, err = c.Conn.Read(more)
		buf = append(buf, more[:m]...)
	}
	line, _, _ := strings.Cut(string(buf), "\n")
	reason := strings.TrimSpace(strings.TrimPrefix(line, refused))
	c.refusal = true
	c.err = fmt.Errorf("%w: runboxd refused the connection (%s): this client sent no secret; reach a sandbox through its provider's Dialer", runbox.ErrUnauthenticated, reason)
	if c.onRefusal != nil {
		c.onRefusal(c.err)
	}
}
