package ssh

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

	gossh "golang.org/x/crypto/ssh"
)

// link is the provider's connection to one endpoint: dialled on first use,
// shared by every sandbox and call on that endpoint, and dialled again when
// it breaks (a dropped network, a killed sshd child, a failed keepalive).
type link struct {
	p  *Provider
	ep endpoint

	mu     sync.Mutex
	cur    *conn
	closed bool
	// verified maps the SHA-256 of a runboxd binary this link has checked
	// on the remote host to its remote path, so Create checks it once per
	// provider, not once per sandbox.
	verified  map[string]string
	installMu sync.Mutex
	// sessions bounds the shell sessions open at once on the connection:
	// sshd refuses more than its MaxSessions (10 by default) per
	// connection. Channels to runboxd's socket are not sessions.
	sessions chan struct{}
}

// maxSessions is how many remote scripts a link runs at once.
const maxSessions = 8

// conn is one SSH connection, with the jump hosts' connections it runs
// through.
type conn struct {
	client *gossh.Client
	hops   []*gossh.Client
	done   chan struct{} // closed when the connection has ended
}

// close closes the connection and its hops.
func (c *conn) close() {
	c.client.Close()
	for i := len(c.hops) - 1; i >= 0; i-- {
		c.hops[i].Close()
	}
}

// linkFor returns the provider's link to the endpoint target resolves to.
func (p *Provider) linkFor(target string) (*link, error) {
	cfg, err := p.loadConfig()
	if err != nil {
		return nil, err
	}
	ep, err := cfg.resolve(target, 0)
	if err != nil {
		return nil, err
	}
	key := ep.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.links[key]; ok {
		return l, nil
	}
	if p.links == nil {
		p.links = make(map[string]*link)
	}
	l := &link{p: p, ep: ep, sessions: make(chan struct{}, maxSessions)}
	p.links[key] = l
	return l, nil
}

// client returns the link's live SSH client, connecting when there is none.
func (l *link) client(ctx context.Context) (*gossh.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("ssh provider closed")
	}
	if l.cur != nil {
		select {
		case <-l.cur.done:
			l.cur = nil
		default:
			return l.cur.client, nil
		}
	}
	c, err := l.p.connect(ctx, l.ep)
	if err != nil {
		return nil, err
	}
	l.cur = c
	go l.watch(c)
	return c.client, nil
}

// reset closes the connection client belongs to, if it is still the
// link's, so the next call dials afresh.
func (l *link) reset(client *gossh.Client) {
	l.mu.Lock()
	c := l.cur
	if c == nil || c.client != client {
		l.mu.Unlock()
		return
	}
	l.cur = nil
	l.mu.Unlock()
	c.close()
}

// watch ends c when its peer goes, and sends keepalives so that a peer
// that vanished without a word is noticed.
func (l *link) watch(c *conn) {
	waited := make(chan struct{})
	go func() {
		c.client.Wait()
		close(waited)
	}()
	t := time.NewTicker(keepaliveEvery)
	defer t.Stop()
	for {
		select {
		case <-waited:
			c.close()
			close(c.done)
			return
		case <-t.C:
			if !keepalive(c.client, waited) {
				c.close() // Wait returns, and the case above ends it
			}
		}
	}
}

// keepalive asks the server for an answer and reports whether it came
// within keepaliveTimeout (or the connection ended meanwhile, which the
// caller learns by itself).
func keepalive(client *gossh.Client, waited <-chan struct{}) bool {
	answered := make(chan error, 1)
	go func() {
		_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
		answered <- err
	}()
	timer := time.NewTimer(keepaliveTimeout)
	defer timer.Stop()
	select {
	case err := <-answered:
		return err == nil
	case <-waited:
		return true
	case <-timer.C:
		return false
	}
}

// close closes the link's connection for good.
func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	c := l.cur
	l.cur = nil
	l.mu.Unlock()
	if c != nil {
		c.close()
		<-c.done
	}
}

// connect opens an SSH connection to e, through its jump hosts.
func (p *Provider) connect(ctx context.Context, e endpoint) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	hops := append(append([]endpoint(nil), e.Jumps...), e)
	c := &conn{done: make(chan struct{})}
	var prev *gossh.Client
	for i, hop := range hops {
		var nc net.Conn
		var err error
		if prev == nil {
			var d net.Dialer
			nc, err = d.DialContext(ctx, "tcp", hop.addr())
			if err == nil {
				nc = withQuickAck(nc)
			}
		} else {
			nc, err = prev.DialContext(ctx, "tcp", hop.addr())
		}
		if err != nil {
			err = fmt.Errorf("ssh: connect to %s: %w", hop.addr(), err)
			if i > 0 {
				err = fmt.Errorf("ssh: through jump host %s: %w", hops[i-1].addr(), err)
			}
			for _, h := range c.hops {
				h.Close()
			}
			return nil, err
		}
		client, err := p.handshake(ctx, nc, hop)
		if err != nil {
			nc.Close()
			for _, h := range c.hops {
				h.Close()
			}
			if i < len(hops)-1 {
				err = fmt.Errorf("jump host %s: %w", hop.Alias, err)
			}
			return nil, err
		}
		if i < len(hops)-1 {
			c.hops = append(c.hops, client)
		} else {
			c.client = client
		}
		prev = client
	}
	return c, nil
}

// handshake runs SSH's handshake and authentication on nc, bounded by ctx.
func (p *Provider) handshake(ctx context.Context, nc net.Conn, e endpoint) (*gossh.Client, error) {
	hk := &hostKeys{files: p.knownHostsFiles(e), acceptNew: p.AcceptNew || e.AcceptNew, hash: e.HashKnownHosts}
	cred := p.credentialsFor(e)
	defer cred.close()
	cfg := &gossh.ClientConfig{
		User:              e.User,
		Auth:              cred.methods,
		HostKeyCallback:   hk.check,
		HostKeyAlgorithms: hk.knownAlgorithms(e.keyName(), nc.RemoteAddr()),
		Timeout:           connectTimeout,
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	sc, chans, reqs, err := gossh.NewClientConn(nc, e.keyName(), cfg)
	if err != nil {
		var herr *HostKeyError
		switch {
		case errors.As(err, &herr), errors.Is(err, ErrHostKeyChanged):
			return nil, err
		case ctx.Err() != nil:
			return nil, fmt.Errorf("ssh: handshake with %s: %w", e.addr(), context.Cause(ctx))
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, cred.authError(e, err)
		}
		return nil, fmt.Errorf("ssh: handshake with %s: %w", e.addr(), err)
	}
	if !stop() {
		sc.Close()
		return nil, fmt.Errorf("ssh: handshake with %s: %w", e.addr(), context.Cause(ctx))
	}
	return gossh.NewClient(sc, chans, reqs), nil
}

// runError is a remote command that failed: its exit status and what it
// said on stderr.
type runError struct {
	what   string
	status int
	stderr string
	err    error
}

func (e *runError) Error() string {
	s := fmt.Sprintf("%s on the remote host", e.what)
	if e.status != 0 {
		s += fmt.Sprintf(" exited %d", e.status)
	} else {
		s += fmt.Sprintf(": %v", e.err)
	}
	if e.stderr != "" {
		s += ": " + e.stderr
	}
	return s
}

func (e *runError) Unwrap() error { return e.err }

// run runs script with /bin/sh on the remote host, with args as $1..., and
// returns its stdout. stdin, when not nil, is the script's standard input.
// A connection that breaks before the session opens is dialled again once.
func (l *link) run(ctx context.Context, what, script string, stdin io.Reader, args ...string) ([]byte, error) {
	select {
	case l.sessions <- struct{}{}:
		defer func() { <-l.sessions }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	var sess *gossh.Session
	for attempt := 0; ; attempt++ {
		client, err := l.client(ctx)
		if err != nil {
			return nil, err
		}
		sess, err = client.NewSession()
		if err == nil {
			break
		}
		// A refused channel is the server's answer on a live connection;
		// anything else means the connection broke: dial a fresh one.
		var oce *gossh.OpenChannelError
		if !errors.As(err, &oce) {
			l.reset(client)
		}
		if oce != nil || attempt > 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: open an ssh session: %w", what, err)
		}
	}
	defer sess.Close()
	var stdout, stderr bytes.Buffer
	sess.Stdout, sess.Stderr = &stdout, &stderr
	if stdin != nil {
		sess.Stdin = stdin
	}
	cmd := "exec /bin/sh -c " + shellQuote(script) + " runbox"
	for _, a := range args {
		cmd += " " + shellQuote(a)
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	err := sess.Run(cmd)
	if err != nil {
		re := &runError{what: what, stderr: strings.TrimSpace(stderr.String()), err: err}
		var ee *gossh.ExitError
		if errors.As(err, &ee) {
			re.status = ee.ExitStatus()
		}
		if ctx.Err() != nil {
			re.err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		return stdout.Bytes(), re
	}
	return stdout.Bytes(), nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
