package daemonauth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runbox/runbox"
)

// Listen returns ln with every connection it accepts authenticated against
// sum, the SHA-256 of the sandbox's secret. A connection is verified on its
// first Read or Write, in the goroutine that serves it, so a peer that sends
// nothing holds only its own connection (for at most Timeout), never
// Accept. A refused connection is answered with a refusal line, closed, and
// logged on log (nil: not logged); its Read and Write fail with an error
// wrapping runbox.ErrUnauthenticated.
func Listen(ln net.Listener, sum [sha256.Size]byte, log *slog.Logger) net.Listener {
	return listen(ln, sum, log, Timeout)
}

// listen is Listen with the handshake's bound given (shorter in tests).
func listen(ln net.Listener, sum [sha256.Size]byte, log *slog.Logger, timeout time.Duration) net.Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &listener{Listener: ln, sum: sum, refusals: &refusalLog{log: log}, timeout: timeout}
}

type listener struct {
	net.Listener
	sum      [sha256.Size]byte
	refusals *refusalLog
	timeout  time.Duration
}

// refusalLogEvery is the least time between two refusal log lines: a
// command that can reach the socket must not be able to fill the log.
const refusalLogEvery = time.Second

// refusalLog logs refused connections, at most one line per
// refusalLogEvery, each line counting the refusals not logged before it.
type refusalLog struct {
	log        *slog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (r *refusalLog) refused(reason error) {
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < refusalLogEvery {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	r.log.Warn("refused a connection", "reason", reason, "refused_unlogged_before", n)
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, sum: &l.sum, refusals: l.refusals, timeout: l.timeout}, nil
}

// conn is an accepted connection that authenticates its peer before its
// first byte is read or written.
type conn struct {
	net.Conn
	sum      *[sha256.Size]byte
	refusals *refusalLog
	timeout  time.Duration

	once sync.Once
	err  error
	done atomic.Bool // the handshake is over: deadlines pass straight through

	mu           sync.Mutex
	rd, wd       time.Time // deadlines the server set while the handshake ran
	rdSet, wdSet bool
}

// NetConn returns the connection under the authentication, for a caller
// that has read through it already (so the peer is authenticated) and
// needs the socket itself (fd passing, internal/fdpass). Before the
// handshake is over it returns nil.
func (c *conn) NetConn() net.Conn {
	if !c.done.Load() || c.err != nil {
		return nil
	}
	return c.Conn
}

func (c *conn) Read(p []byte) (int, error) {
	if err := c.authenticate(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *conn) Write(p []byte) (int, error) {
	if err := c.authenticate(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// The deadline setters hold a deadline set during the handshake, which uses
// its own, and apply it once the handshake is over.

func (c *conn) SetDeadline(t time.Time) error {
	if c.hold(&t, &t) {
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	if c.hold(&t, nil) {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.hold(nil, &t) {
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}

// hold records the read and write deadlines given (nil: unchanged) while
// the handshake has not ended, and reports whether it did.
func (c *conn) hold(rd, wd *time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done.Load() {
		return false
	}
	if rd != nil {
		c.rd, c.rdSet = *rd, true
	}
	if wd != nil {
		c.wd, c.wdSet = *wd, true
	}
	return true
}

// authenticate runs the handshake once; every later call returns its
// outcome.
func (c *conn) authenticate() error {
	c.once.Do(func() {
		c.err = c.handshake()
		c.mu.Lock()
		c.done.Store(true)
		c.Conn.SetDeadline(time.Time{})
		if c.rdSet {
			c.Conn.SetReadDeadline(c.rd)
		}
		if c.wdSet {
			c.Conn.SetWriteDeadline(c.wd)
		}
		c.mu.Unlock()
		if c.err != nil {
			if c.err != errLeftSilently {
				c.refusals.refused(c.err)
			}
			c.Conn.Close()
		}
	})
	return c.err
}

// errLeftSilently ends a connection whose peer closed it without sending a
// byte: a readiness probe that only checks the socket accepts, not worth a
// log line.
var errLeftSilently = fmt.Errorf("%w: peer left without a word", errRefused)

// refusalBound bounds writing a refusal to a peer that does not read it.
const refusalBound = time.Second

// errRefused is why a peer's connection was refused (wrapped in what
// authenticate returns).
var errRefused = fmt.Errorf("%w: handshake failed", runbox.ErrUnauthenticated)

// handshake reads the peer's preamble, bounded by Timeout and by its fixed
// length, and answers it.
func (c *conn) handshake() error {
	c.Conn.SetDeadline(time.Now().Add(c.timeout))
	var buf [preambleLen]byte
	n := 0
	for n < preambleLen {
		m, err := c.Conn.Read(buf[n:])
		n += m
		// Refuse as soon as the bytes cannot be a preamble: a client that
		// starts with HTTP (curl, a client without the secret) hears why
		// at once instead of waiting for bytes it will never send.
		if k := min(n, len(magic)); !bytes.Equal(buf[:k], []byte(magic[:k])) {
			return c.refuse("no secret: connections to runboxd start with the sandbox's secret (use the provider's dialer)")
		}
		if err != nil {
			if n < preambleLen {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return c.refuse(fmt.Sprintf("no secret within %v", c.timeout))
				}
				if n == 0 && errors.Is(err, io.EOF) {
					return errLeftSilently
				}
				return fmt.Errorf("%w: peer left during the handshake: %v", errRefused, err)
			}
			break
		}
	}
	hexSecret := buf[len(magic) : preambleLen-1]
	secret := make([]byte, SecretSize)
	if _, err := hex.Decode(secret, hexSecret); err != nil || buf[preambleLen-1] != '\n' {
		return c.refuse("malformed secret")
	}
	sum := sha256.Sum256(secret)
	if subtle.ConstantTimeCompare(sum[:], c.sum[:]) != 1 {
		return c.refuse("wrong secret")
	}
	if _, err := c.Conn.Write([]byte(okLine)); err != nil {
		return fmt.Errorf("%w: answer the handshake: %v", errRefused, err)
	}
	return nil
}

// refuse tells the peer why (best effort) and returns the error the
// connection then fails with.
func (c *conn) refuse(reason string) error {
	c.Conn.SetWriteDeadline(time.Now().Add(refusalBound))
	c.Conn.Write([]byte(refused + reason + "\n"))
	return fmt.Errorf("%w: %s", errRefused, reason)
}
