package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/runbox/runbox"
)

// selfAPI is the in-process way into the server's own exec and files API
// (RunboxService and FilesService), for the MCP sessions the server
// serves. A client over it goes through the very path an API client's call
// takes (routing, quotas, audit rows, metrics, the sandbox's use for the
// reaper), as the tenant it was made for and routed to one sandbox. There
// is no token and no socket: connections are in-memory pipes, which
// nothing in a sandbox can reach.
type selfAPI struct {
	hs    *http.Server
	ln    *pipeListener
	start sync.Once
	wg    sync.WaitGroup
}

// selfCaller is who a connection to the selfAPI speaks for.
type selfCaller struct {
	place   *mcpPlace // its tenant, read afresh for each call
	sandbox string    // the sandbox its calls are routed to
}

// selfConn is the server's end of a selfAPI connection.
type selfConn struct {
	net.Conn
	caller selfCaller
}

type selfCallerKey struct{}

func newSelfAPI(s *Server) *selfAPI {
	mux := http.NewServeMux()
	s.sandboxAPI(mux)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	a := &selfAPI{ln: newPipeListener()}
	a.hs = &http.Server{
		Protocols: &protocols,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*selfConn); ok {
				ctx = context.WithValue(ctx, selfCallerKey{}, sc.caller)
			}
			return ctx
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, ok := r.Context().Value(selfCallerKey{}).(selfCaller)
			if !ok {
				http.Error(w, "no caller on the connection", http.StatusInternalServerError)
				return
			}
			// The connection, not the request, says which sandbox and
			// tenant: nothing a caller sends can change them.
			r.Header.Set(SandboxHeader, c.sandbox)
			mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, c.place.tenantNow())))
		}),
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return a
}

// dialer returns a Dialer of connections to the selfAPI for c.
func (a *selfAPI) dialer(c selfCaller) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		a.start.Do(func() {
			a.wg.Go(func() { _ = a.hs.Serve(a.ln) })
		})
		client, server := net.Pipe()
		if err := a.ln.deliver(ctx, &selfConn{Conn: server, caller: c}); err != nil {
			client.Close()
			server.Close()
			return nil, fmt.Errorf("connect to runbox serve's own API for sandbox %s: %w", c.sandbox, err)
		}
		return client, nil
	}
}

// close ends every connection to the selfAPI.
func (a *selfAPI) close() {
	a.ln.Close()
	a.hs.Close()
	a.wg.Wait()
}

// pipeListener is a net.Listener of in-memory connections handed to it.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to Accept.
func (l *pipeListener) deliver(ctx context.Context, c net.Conn) error {
	select {
	case l.conns <- c:
		return nil
	case <-l.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Accept implements net.Listener.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "runbox-serve-self" }
