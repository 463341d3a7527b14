package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/yamux"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/homes"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// A kubernetes sandbox's persistent endpoint (package internal/endpoint,
// `runbox-full endpoint kubernetes ID`) holds one exec stream in the pod
// running `runboxd proxy --mux`, and carries each connection as a yamux
// stream over it, which the proxy joins to a connection of its own to
// runboxd's socket. A connection then costs a local dial and one stream
// open, not TLS and an exec (a process started in the pod by the kubelet
// and the container runtime). The endpoint carries bytes: each connection
// is authenticated end to end by the sandbox's secret, which the caller
// (the runbox front) reads from the local record below. Nothing new
// listens in the pod: the proxy is a child of the exec, reachable only
// through it.
//
// The local record, <Home>/kubernetes/<id>/ (0700), holds sandbox.json
// (the id, name, namespace, context, pod and its UID) and secret (0600).
// The provider writes it when it creates a sandbox or when its Dialer
// reads a sandbox's secret from its Secret (a runbox-full command that
// uses the sandbox; not a listing's probe), and removes it when it removes
// the sandbox. Like the name index it is a
// cache: a pod deleted behind runbox's back leaves a record whose endpoint
// finds the pod gone, exits, and removes it.

// recordsDir is the directory of the local records under a runbox home.
const recordsDir = "kubernetes"

// localRecord is sandbox.json of a local record.
type localRecord struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace"`
	Context   string `json:"context,omitempty"`
	Pod       string `json:"pod"`
	UID       string `json:"uid"`
}

// recordDir returns the local record's directory, "" without a home or
// with one that others may change (homes.Open refuses it: no secret is
// written there, and the sandbox is reached through the cluster).
func (p *Provider) recordDir(id string) string {
	if p.Home == "" || !sandboxkey.ValidID(id) {
		return ""
	}
	home, err := homes.Open(p.Home)
	if err != nil {
		return ""
	}
	return filepath.Join(home, recordsDir, id)
}

// context returns the kubeconfig context the provider uses ("" for the
// current one).
func (p *Provider) context() string { return firstNonEmpty(p.Context, os.Getenv(ContextEnv)) }

// remember writes the local record of a sandbox and its secret (best
// effort: without it the front hands the sandbox to runbox-full).
func (p *Provider) remember(rec localRecord, secret []byte) {
	dir := p.recordDir(rec.ID)
	if dir == "" || p.Config != nil {
		return // no home, or a cluster the record could not name
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	if old, err := os.ReadFile(filepath.Join(dir, "sandbox.json")); err == nil && string(old) == string(b) {
		if s, err := os.ReadFile(filepath.Join(dir, "secret")); err == nil && string(s) == string(secret) {
			return
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	// The secret first: a sandbox.json the front reads has its secret.
	if writeFileAtomic(filepath.Join(dir, "secret"), secret) == nil {
		writeFileAtomic(filepath.Join(dir, "sandbox.json"), b)
	}
}

// forget removes the local record of sandbox id.
func (p *Provider) forget(id string) {
	if dir := p.recordDir(id); dir != "" {
		os.RemoveAll(dir)
	}
}

// readRecord reads the local record of sandbox id.
func (p *Provider) readRecord(id string) (localRecord, []byte, error) {
	dir := p.recordDir(id)
	if dir == "" {
		return localRecord{}, nil, fmt.Errorf("kubernetes sandbox %q: no local record (no runbox home, or not an id)", id)
	}
	var rec localRecord
	b, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err == nil && rec.ID != id {
		err = fmt.Errorf("it names sandbox %q", rec.ID)
	}
	if err != nil {
		return localRecord{}, nil, fmt.Errorf("kubernetes sandbox %s: local record: %w", id, err)
	}
	secret, err := daemonauth.ReadSecretFile(filepath.Join(dir, "secret"))
	if err != nil {
		return localRecord{}, nil, fmt.Errorf("kubernetes sandbox %s: %w", id, err)
	}
	return rec, secret, nil
}

// writeFileAtomic replaces path with b (0600) by a rename.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// StreamDialer returns how a persistent endpoint reaches sandbox id's
// runboxd: dial opens a yamux stream on the endpoint's one exec stream of
// `runboxd proxy --mux` (opened on first use, and again after it breaks),
// unauthenticated (the caller presents the secret); gone reports that the
// sandbox is gone: its local record removed (runbox rm), or its pod lost
// (deleted, ended), in which case the record is removed too. The sandbox
// must have a local record (Home), whose namespace and context the
// provider takes where its own are unset.
func (p *Provider) StreamDialer(id string) (dial func(ctx context.Context) (net.Conn, error), gone func() bool, err error) {
	rec, _, err := p.readRecord(id)
	if err != nil {
		return nil, nil, err
	}
	if p.Namespace == "" {
		p.Namespace = rec.Namespace
	}
	if p.Context == "" {
		p.Context = rec.Context
	}
	l := &muxLink{p: p, rec: rec}
	return l.dial, l.gone, nil
}

// muxLink is an endpoint's exec stream of `runboxd proxy --mux` and the
// yamux session on it.
type muxLink struct {
	p   *Provider
	rec localRecord

	mu   sync.Mutex
	sess *yamux.Session
	lost bool // the pod is lost: the sandbox is gone
}

// dial opens a stream to runboxd, on a new session when the last one has
// broken.
func (l *muxLink) dial(ctx context.Context) (net.Conn, error) {
	for attempt := 0; ; attempt++ {
		s, err := l.session(ctx)
		if err != nil {
			return nil, err
		}
		c, err := s.Open()
		if err == nil {
			return c, nil
		}
		l.drop(s)
		if attempt > 0 {
			return nil, fmt.Errorf("kubernetes sandbox %s: open a stream: %w", l.rec.ID, err)
		}
	}
}

// session returns the live session, opening the exec stream when there is
// none.
func (l *muxLink) session(ctx context.Context) (*yamux.Session, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess != nil && !l.sess.IsClosed() {
		return l.sess, nil
	}
	api, err := l.p.client()
	if err != nil {
		return nil, err
	}
	if api.namespace != l.rec.Namespace {
		return nil, fmt.Errorf("kubernetes sandbox %s is in namespace %s, the provider's is %s", l.rec.ID, l.rec.Namespace, api.namespace)
	}
	// The stream outlives the dial that opens it: only opening it is
	// bounded by ctx.
	var ec *execConn
	conn, err := dialPastKilledProxies(ctx, func(ctx context.Context) (net.Conn, error) {
		c, err := l.p.execStream(context.WithoutCancel(ctx), api, l.rec.Pod, l.rec.UID,
			[]string{podRunboxd, "proxy", "--mux", "--socket", socketName(l.rec.ID)})
		if err != nil {
			return nil, err
		}
		ec = c
		return c, nil
	})
	if errors.Is(err, runbox.ErrSandboxLost) {
		l.lost = true
		l.p.forget(l.rec.ID)
	}
	if err != nil {
		return nil, err
	}
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	sess, err := yamux.Client(conn, cfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("kubernetes sandbox %s: mux: %w", l.rec.ID, err)
	}
	l.sess = sess
	// A pod lost under the session (deleted, ended: the pod watch cuts the
	// stream saying so) is the sandbox gone, without waiting for a dial.
	go func() {
		<-sess.CloseChan()
		ec.mu.Lock()
		lost := ec.lost
		ec.mu.Unlock()
		if errors.Is(lost, runbox.ErrSandboxLost) {
			l.mu.Lock()
			l.lost = true
			l.mu.Unlock()
			l.p.forget(l.rec.ID)
		}
	}()
	return sess, nil
}

// drop closes s if it is still the live session.
func (l *muxLink) drop(s *yamux.Session) {
	l.mu.Lock()
	if l.sess == s {
		l.sess = nil
	}
	l.mu.Unlock()
	s.Close()
}

// gone reports whether the sandbox is gone: its pod lost, or its local
// record removed.
func (l *muxLink) gone() bool {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost {
		return true
	}
	_, err := os.Stat(filepath.Join(l.p.recordDir(l.rec.ID), "secret"))
	return errors.Is(err, os.ErrNotExist)
}
