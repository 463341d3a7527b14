package daemonauth

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/runbox/runbox"
)

// Handshake authenticates conn, a fresh byte stream to runboxd, with
// secret. It returns the connection that carries the API once the daemon
// has accepted it: conn itself, or conn behind a buffer holding what the
// daemon sent right after its answer (its first HTTP/2 frames), which the
// answer's read took in with it. It returns an error wrapping
// runbox.ErrUnauthenticated when the daemon refused the secret; another
// error when the stream failed or the peer does not speak the handshake. It
// is bounded by ctx and by Timeout, and leaves conn without deadlines on
// success. The caller closes conn on error.
func Handshake(ctx context.Context, conn net.Conn, secret []byte) (net.Conn, error) {
	return HandshakeWithin(ctx, conn, secret, Timeout)
}

// HandshakeWithin is Handshake bounded by limit instead of Timeout: for a
// conn whose far end may first have to reach runboxd (a persistent
// endpoint making its SSH connection or exec stream on the first
// connection it carries).
func HandshakeWithin(ctx context.Context, conn net.Conn, secret []byte, limit time.Duration) (net.Conn, error) {
	if err := CheckSecret(secret); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var pre [preambleLen]byte
	copy(pre[:], magic)
	hex.Encode(pre[len(magic):], secret)
	pre[preambleLen-1] = '\n'
	if _, err := conn.Write(pre[:]); err != nil {
		return nil, handshakeErr(ctx, err)
	}
	line, rest, err := readLine(conn)
	if err != nil {
		if len(line) > 0 || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("runboxd authentication: the peer closed the connection after %q: does it speak the handshake (an older runboxd)?", line)
		}
		return nil, handshakeErr(ctx, err)
	}
	if !stop() {
		return nil, handshakeErr(ctx, context.Cause(ctx))
	}
	conn.SetDeadline(time.Time{})
	switch {
	case line == okLine:
		if len(rest) > 0 {
			return &prefixedConn{Conn: conn, head: rest}, nil
		}
		return conn, nil
	case strings.HasPrefix(line, refused):
		return nil, fmt.Errorf("%w: runboxd refused the connection: %s", runbox.ErrUnauthenticated,
			strings.TrimSpace(strings.TrimPrefix(line, refused)))
	}
	return nil, fmt.Errorf("runboxd authentication: unexpected answer %q: does the peer speak the handshake (an older runboxd)?", line)
}

// handshakeErr names what failed, with ctx's cause when ctx ended.
func handshakeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("runboxd authentication: %w", context.Cause(ctx))
	}
	return fmt.Errorf("runboxd authentication: %w", err)
}

// readLine reads one line of at most maxStatusLine bytes and returns it with
// whatever the same reads brought in after it (rest). Reading a byte at a
// time would consume nothing past the line, but costs a system call per
// byte on every new connection.
func readLine(r io.Reader) (line string, rest []byte, err error) {
	buf := make([]byte, 0, 2*maxStatusLine)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if i := bytes.IndexByte(buf, '\n'); i >= 0 && i < maxStatusLine {
			return string(buf[:i+1]), buf[i+1:], nil
		}
		if len(buf) >= maxStatusLine {
			return string(buf[:maxStatusLine]), nil, fmt.Errorf("answer longer than %d bytes", maxStatusLine)
		}
		if err != nil {
			return string(buf), nil, err
		}
	}
}

// prefixedConn is a connection whose first bytes were read already: Read
// returns head before reading conn again.
type prefixedConn struct {
	net.Conn
	head []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Dialer returns dial with every connection it opens authenticated by
// Handshake with secret; a connection that fails the handshake is closed.
func Dialer(dial runbox.Dialer, secret []byte) runbox.Dialer {
	return DialerWithin(dial, secret, Timeout)
}

// DialerWithin is Dialer with each handshake bounded by limit
// (HandshakeWithin).
func DialerWithin(dial runbox.Dialer, secret []byte, limit time.Duration) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		conn, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		authed, err := HandshakeWithin(ctx, conn, secret, limit)
		if err != nil {
			conn.Close()
			return nil, err
		}
		return authed, nil
	}
}
