package docker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
)

// Stream ids of the engine's multiplexed (stdcopy) framing: every frame is
// an 8-byte header — stream id, three zero bytes, big-endian payload
// length — followed by the payload.
const (
	frameStdin  = 0
	frameStdout = 1
	frameStderr = 2
	frameSystem = 3
	headerLen   = 8
	// stderrKeep is how much of the proxy's stderr execConn keeps for error
	// messages (the proxy writes a line or two when it fails).
	stderrKeep = 2048
)

// execConn is the byte stream to runboxd through a `docker exec` of
// `runboxd proxy`: writes go raw to the process's stdin over the hijacked
// connection; reads return the payload of the stdout frames of the engine's
// multiplexed stream. The engine multiplexes a non-TTY exec's output even
// when only stdout is attached. What the proxy writes to stderr is kept (the
// tail) to explain a stream that ends.
type execConn struct {
	net.Conn // the hijacked connection: Write, deadlines, addresses
	r        *bufio.Reader
	// closeWrite half-closes the hijacked connection, so the proxy sees
	// end of input.
	closeWrite func() error
	exec       string // the engine's exec id, for errors

	// left is how many payload bytes of the current stdout frame are still
	// unread. Only Read touches it; reads come from one goroutine.
	left int
	hdr  [headerLen]byte

	mu     sync.Mutex
	stderr []byte

	closeOnce sync.Once
	closeErr  error
}

// newExecConn wraps a hijacked exec connection; r reads conn (buffered).
func newExecConn(conn net.Conn, r *bufio.Reader, closeWrite func() error, execID string) *execConn {
	return &execConn{Conn: conn, r: r, closeWrite: closeWrite, exec: execID}
}

// Read returns bytes runboxd sent, from the stdout frames.
func (c *execConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for c.left == 0 {
		if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
			return 0, c.endErr(err)
		}
		size := int(binary.BigEndian.Uint32(c.hdr[4:]))
		switch c.hdr[0] {
		case frameStdout:
			c.left = size
		case frameStderr:
			if err := c.keepStderr(size); err != nil {
				return 0, c.endErr(err)
			}
		case frameSystem:
			msg := make([]byte, size)
			if _, err := io.ReadFull(c.r, msg); err != nil {
				return 0, c.endErr(err)
			}
			return 0, fmt.Errorf("docker exec %s: engine error: %s", c.exec, strings.TrimSpace(string(msg)))
		case frameStdin:
			if _, err := io.CopyN(io.Discard, c.r, int64(size)); err != nil {
				return 0, c.endErr(err)
			}
		default:
			return 0, fmt.Errorf("docker exec %s: unknown stream id %d in the multiplexed stream", c.exec, c.hdr[0])
		}
	}
	n, err := c.r.Read(p[:min(len(p), c.left)])
	c.left -= n
	switch {
	case err == nil:
		return n, nil
	case n > 0:
		// Deliver what arrived; the error comes back on the next Read.
		return n, nil
	case errors.Is(err, io.EOF):
		err = io.ErrUnexpectedEOF // the stream ended inside a frame
	}
	return n, c.endErr(err)
}

// keepStderr reads size bytes of a stderr frame into the kept tail.
func (c *execConn) keepStderr(size int) error {
	buf := make([]byte, size)
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return err
	}
	c.mu.Lock()
	c.stderr = append(c.stderr, buf...)
	if len(c.stderr) > stderrKeep {
		c.stderr = append([]byte(nil), c.stderr[len(c.stderr)-stderrKeep:]...)
	}
	c.mu.Unlock()
	return nil
}

// endErr explains the end of the stream: io.EOF stays io.EOF (wrapped, so
// errors.Is works), with the proxy's last words when it said any.
func (c *execConn) endErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("truncated frame: %w", err)
	}
	c.mu.Lock()
	tail := strings.TrimSpace(string(c.stderr))
	c.mu.Unlock()
	if tail == "" {
		if err == io.EOF {
			return io.EOF
		}
		return fmt.Errorf("docker exec %s (runboxd proxy): %w", c.exec, err)
	}
	return fmt.Errorf("docker exec %s (runboxd proxy) ended: %s: %w", c.exec, tail, err)
}

// Close half-closes the stream first, so the proxy sees end of input and
// exits by itself, then closes the connection. It is idempotent.
func (c *execConn) Close() error {
	c.closeOnce.Do(func() {
		if c.closeWrite != nil {
			c.closeWrite()
		}
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

// CloseWrite half-closes the stream: the proxy sees end of input.
func (c *execConn) CloseWrite() error {
	if c.closeWrite == nil {
		return nil
	}
	return c.closeWrite()
}
