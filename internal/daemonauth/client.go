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
// secret. It returns nil once the daemon has accepted it (conn then carries
// the API); an error wrapping runbox.ErrUnauthenticated when the daemon
// refused the secret; another error when the stream failed or the peer does
// not speak the handshake. It is bounded by ctx and by Timeout, and leaves
// conn without deadlines on success. The caller closes conn on error.
func Handshake(ctx context.Context, conn net.Conn, secret []byte) error {
	if err := CheckSecret(secret); err != nil {
		return err
	}
	deadline := time.Now().Add(Timeout)
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
		return handshakeErr(ctx, err)
	}
	line, err := readLine(conn)
	if err != nil {
		if len(line) > 0 || errors.Is(err, io.EOF) {
			return fmt.Errorf("runboxd authentication: the peer closed the connection after %q: does it speak the handshake (an older runboxd)?", line)
		}
		return handshakeErr(ctx, err)
	}
	if !stop() {
		return handshakeErr(ctx, context.Cause(ctx))
	}
	conn.SetDeadline(time.Time{})
	switch {
	case line == okLine:
		return nil
	case strings.HasPrefix(line, refused):
		return fmt.Errorf("%w: runboxd refused the connection: %s", runbox.ErrUnauthenticated,
			strings.TrimSpace(strings.TrimPrefix(line, refused)))
	}
	return fmt.Errorf("runboxd authentication: unexpected answer %q: does the peer speak the handshake (an older runboxd)?", line)
}

// handshakeErr names what failed, with ctx's cause when ctx ended.
func handshakeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("runboxd authentication: %w", context.Cause(ctx))
	}
	return fmt.Errorf("runboxd authentication: %w", err)
}

// readLine reads one line of at most maxStatusLine bytes, one byte at a
// time so that nothing after it is consumed.
func readLine(r io.Reader) (string, error) {
	var b bytes.Buffer
	var c [1]byte
	for b.Len() < maxStatusLine {
		n, err := r.Read(c[:])
		if n == 1 {
			b.WriteByte(c[0])
			if c[0] == '\n' {
				return b.String(), nil
			}
		}
		if err != nil {
			return b.String(), err
		}
	}
	return b.String(), fmt.Errorf("answer longer than %d bytes", maxStatusLine)
}

// Dialer returns dial with every connection it opens authenticated by
// Handshake with secret; a connection that fails the handshake is closed.
func Dialer(dial runbox.Dialer, secret []byte) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		conn, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		if err := Handshake(ctx, conn, secret); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}
