package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ErrInsecureListen is returned by CheckListen for plain HTTP on an
// address other hosts can reach.
var ErrInsecureListen = errors.New("plain HTTP on a non-loopback address")

// CheckListen refuses to serve plain HTTP (no TLS) on addr unless addr is
// a loopback address or insecure is set: bearer tokens would cross the
// network in clear.
func CheckListen(addr string, withTLS, insecure bool) error {
	if withTLS || insecure {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %s would send bearer tokens in clear; give --tls-cert and --tls-key, listen on 127.0.0.1, or pass --insecure", ErrInsecureListen, addr)
}

// ServeOptions tune Serve.
type ServeOptions struct {
	// TLS, when set, serves HTTPS (HTTP/2 and HTTP/1.1); else HTTP/2
	// cleartext and HTTP/1.1.
	TLS *tls.Config
	// ShutdownTimeout bounds how long unary calls in flight get to finish
	// once ctx ends; zero means 30 s.
	ShutdownTimeout time.Duration
	// IdleTimeout closes a connection idle this long (HTTP/1.1 keep-alive
	// and HTTP/2 alike); zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxConnsPerIP bounds one client IP's concurrent connections (one
	// over it is closed at once); zero means DefaultMaxConnsPerIP.
	MaxConnsPerIP int
}

// Serve starts the server (Start), serves on ln until ctx ends, then shuts
// down gracefully: MCP sessions end (CloseMCP), no new connections,
// streaming calls end (clients re-attach to the next server), unary calls
// in flight finish (up to ShutdownTimeout), and sandboxes keep running. It closes ln and the
// Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener, o ServeOptions) error {
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConnsPerIP <= 0 {
		o.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	capped := newCapListener(ln, o.MaxConnsPerIP)
	s.mu.Lock()
	s.conns = capped
	s.mu.Unlock()
	ln = capped
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if o.TLS != nil {
		protocols.SetHTTP2(true)
		ln = tls.NewListener(ln, o.TLS)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       o.IdleTimeout, // HTTP/2 (h2 and h2c) takes it too
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
		},
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	s.log.Info("serving", "addr", ln.Addr().String(), "tls", o.TLS != nil)
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "reason", context.Cause(ctx).Error())
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	// MCP sessions live in this process only: end them (stopping what
	// their calls run, removing their default sandboxes) while the API
	// they go through still serves.
	if err := s.CloseMCP(sctx); err != nil {
		s.log.Warn("shutdown: MCP sessions", "err", err)
	}
	s.endStreams()
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("shutdown: calls still in flight were cut", "err", err)
		hs.Close()
	}
	s.log.Info("stopped; sandboxes keep running")
	return nil
}
