package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/hashicorp/yamux"
)

// ProxyMux is Proxy for many connections at once: it runs a yamux session
// (the server side) on r and w, one long byte stream such as a pod exec
// stream, and joins each stream the far side opens to a connection of its
// own to runboxd's unix socket at path. It carries bytes only: every stream
// is authenticated by runboxd's own handshake, as a Proxy connection is.
// It returns when the session ends (end of input, or the far side gone) or
// ctx is done.
func ProxyMux(ctx context.Context, path string, r io.Reader, w io.Writer) error {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	cfg.EnableKeepAlive = false // the far side keeps the stream alive
	sess, err := yamux.Server(stdio{r, w}, cfg)
	if err != nil {
		return fmt.Errorf("proxy mux: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			// A session that shut down has lost its link: the far side
			// closed the stream (EOF) or went away mid-write (a reset or
			// broken pipe, depending on which side noticed first). That
			// is this proxy's normal end, not a failure.
			if ctx.Err() != nil || sess.IsClosed() || errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("proxy mux: %w", err)
		}
		go joinStream(ctx, path, s)
	}
}

// joinStream carries one mux stream to a fresh connection to runboxd; a
// socket that does not answer closes the stream (the far side's handshake
// fails).
func joinStream(ctx context.Context, path string, s *yamux.Stream) {
	defer s.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(conn, s)
		if uc, ok := conn.(*net.UnixConn); ok {
			uc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() { io.Copy(s, conn); s.Close(); done <- struct{}{} }()
	<-done
	<-done
}

// stdio joins a reader and a writer into the connection yamux runs on;
// closing it is the process's exit.
type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }
