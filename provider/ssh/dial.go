package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
)

// Dialer returns how to reach the sandbox's runboxd: a direct-streamlocal
// channel to its unix socket on the provider's SSH connection to the host
// (dialled when there is none, or after it broke), opened with the
// sandbox's secret. Each call reads the sandbox's record and secret again.
// A runboxd that is gone from the host is runbox.ErrSandboxLost, with the
// tail of its log.
func (p *Provider) Dialer(sb runbox.Sandbox) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		rec, sbDir, err := p.find(sb.ID)
		if err != nil {
			if errors.Is(err, runbox.ErrSandboxNotFound) {
				return nil, fmt.Errorf("%w: its record is gone from this machine: %v", runbox.ErrSandboxLost, err)
			}
			return nil, err
		}
		secret, err := readSecret(sbDir)
		if err != nil {
			return nil, err
		}
		l, err := p.linkFor(rec.Target)
		if err != nil {
			return nil, err
		}
		conn, err := l.dialSocket(ctx, rec)
		if err != nil {
			return nil, err
		}
		authed, err := daemonauth.Handshake(ctx, conn, secret)
		if err != nil {
			conn.Close()
			return nil, err
		}
		return authed, nil
	}
}

// dialSocket opens a channel to rec's runboxd socket. A connection that
// broke is dialled again once; a socket that refuses is explained: a
// runboxd that is gone makes the error wrap runbox.ErrSandboxLost.
func (l *link) dialSocket(ctx context.Context, rec record) (net.Conn, error) {
	for attempt := 0; ; attempt++ {
		client, err := l.reconnect(ctx)
		if err != nil {
			return nil, err
		}
		ch, err := client.DialContext(ctx, "unix", rec.socket())
		if err == nil {
			return &channelConn{Conn: ch}, nil
		}
		var oce *gossh.OpenChannelError
		switch {
		case ctx.Err() != nil:
			return nil, err
		case errors.As(err, &oce) && oce.Reason == gossh.Prohibited:
			return nil, fmt.Errorf("ssh: %s refuses to forward to runboxd's socket %s (%v): allow it in its sshd_config (AllowStreamLocalForwarding yes, DisableForwarding no)",
				l.ep.addr(), rec.socket(), err)
		case errors.As(err, &oce):
			return nil, l.explain(ctx, rec, fmt.Errorf("ssh: open a channel to %s on %s: %w", rec.socket(), l.ep.addr(), err))
		}
		// The connection itself failed: dial a fresh one, once.
		l.reset(client)
		if attempt > 0 {
			return nil, fmt.Errorf("ssh: open a channel to %s on %s: %w", rec.socket(), l.ep.addr(), err)
		}
	}
}

// reconnect returns the link's client, dialling again for up to
// reconnectPatience while the host cannot be reached (a network outage, an
// sshd restarting), so a stream broken by a dropped connection outlives a
// longer outage than the client's own reconnect window. A refused host key
// or login fails at once.
func (l *link) reconnect(ctx context.Context) (*gossh.Client, error) {
	deadline := time.Now().Add(reconnectPatience)
	backoff := 50 * time.Millisecond
	for {
		client, err := l.client(ctx)
		if err == nil || permanent(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return client, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// permanent reports whether a failure to connect will not go away by
// trying again: a host key or a login refused, a configuration error.
func permanent(err error) bool {
	return errors.Is(err, ErrHostKeyUnknown) || errors.Is(err, ErrHostKeyChanged) || errors.Is(err, ErrAuth) ||
		strings.Contains(err.Error(), "ssh config")
}

// explain adds to err, a failure to reach rec's socket, whether runboxd
// still runs: when it does not, the sandbox is lost, and the error says so
// with the end of runboxd's log.
func (l *link) explain(ctx context.Context, rec record, err error) error {
	alive, tail, serr := l.status(ctx, rec, true)
	switch {
	case serr != nil:
		return fmt.Errorf("%w (and its runboxd's state is unknown: %v)", err, serr)
	case alive:
		return err
	}
	msg := fmt.Sprintf("%v: runboxd (pid %d) is not running on %s", runbox.ErrSandboxLost, rec.Pid, l.ep.addr())
	if tail = strings.TrimSpace(tail); tail != "" {
		msg += "; the end of its log (" + rec.RemoteDir + "/runboxd.log): " + tail
	}
	return fmt.Errorf("%s: %w", msg, errors.Join(runbox.ErrSandboxLost, err))
}

// status reports whether rec's runboxd runs on the host, with the tail of
// its log when withLog is set.
func (l *link) status(ctx context.Context, rec record, withLog bool) (alive bool, logTail string, err error) {
	dir := ""
	if withLog {
		dir = rec.RemoteDir
	}
	out, err := l.run(ctx, "check runboxd", statusScript, nil, fmt.Sprint(rec.Pid), rec.StartTime, dir)
	if err != nil {
		return false, "", err
	}
	state, tail, _ := strings.Cut(string(out), "\n")
	return state == "alive", tail, nil
}

// channelConn is an SSH channel as a net.Conn whose deadlines work: the
// library's channels have none, and the authentication handshake and the
// HTTP/2 transport rely on them. A deadline that passes closes the channel
// (the stream is unusable after a timed-out read anyway), and Read and
// Write then fail with a timeout error.
type channelConn struct {
	net.Conn
	mu      sync.Mutex
	timer   *time.Timer
	expired atomic.Bool
}

// errDeadline is the error after a deadline passed (a net.Error whose
// Timeout is true).
var errDeadline = os.ErrDeadlineExceeded

func (c *channelConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.expired.Load() {
		err = errDeadline
	}
	return n, err
}

func (c *channelConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && c.expired.Load() {
		err = errDeadline
	}
	return n, err
}

// SetDeadline arms (or, with the zero time, disarms) the deadline.
func (c *channelConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if t.IsZero() {
		return nil
	}
	d := time.Until(t)
	if d <= 0 {
		c.expire()
		return nil
	}
	c.timer = time.AfterFunc(d, c.expire)
	return nil
}

// SetReadDeadline and SetWriteDeadline share the one deadline.
func (c *channelConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *channelConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }

func (c *channelConn) expire() {
	c.expired.Store(true)
	c.Conn.Close()
}

// Close closes the channel and stops its deadline.
func (c *channelConn) Close() error {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.mu.Unlock()
	return c.Conn.Close()
}
