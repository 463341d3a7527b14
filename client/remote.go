package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// DefaultRemoteReconnectWindow is the reconnect window of a client of
// runbox serve: long enough to ride out a restart of the server (execs run
// on in their sandboxes meanwhile, and streams re-attach without losing or
// repeating output).
const DefaultRemoteReconnectWindow = 15 * time.Second

// SandboxHeader is the request header naming the sandbox a call to runbox
// serve is for (its id or name).
const SandboxHeader = "Runbox-Sandbox"

// WithTLSConfig sets the TLS configuration for an https:// server (a
// private CA, say); the default verifies against the system's roots.
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// NewRemote returns a Client for the sandbox (id or name) that the runbox
// serve at host holds: host is "http://HOST:PORT" (HTTP/2 cleartext; the
// server accepts it only on loopback unless started --insecure) or
// "https://HOST:PORT", and token one of its bearer tokens (runbox token
// create). Every method works as with New: the server forwards each call
// to the sandbox's runboxd, event for event. Errors the server adds are
// runbox.ErrUnauthenticated (token), runbox.ErrSandboxNotFound (no such
// sandbox for this tenant) and runbox.ErrQuotaExceeded.
func NewRemote(host, token, sandbox string, opts ...Option) *Client {
	o := options{window: DefaultRemoteReconnectWindow, pingAfter: pingAfter, pingTimeout: pingTimeout,
		headroom: streamHeadroom, maxOverdue: maxOverdue, sandbox: sandbox}
	for _, opt := range opts {
		opt(&o)
	}
	t := remoteTransport(host, o)
	hc := &http.Client{Transport: t}
	base := strings.TrimRight(host, "/")
	headers := connect.WithInterceptors(headerInterceptor{token: token, sandbox: sandbox})
	base2, closeBase := context.WithCancelCause(context.Background())
	return &Client{
		rpc: runboxv1connect.NewRunboxServiceClient(hc, base,
			connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(protoCodec{}), headers),
		files: sync.OnceValue(func() runboxv1connect.FilesServiceClient {
			return runboxv1connect.NewFilesServiceClient(hc, base,
				connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(protoCodec{}), headers)
		}),
		transport: t,
		refused:   &refusal{},
		sandbox:   o.sandbox,
		window:    o.window,
		headroom:  o.headroom,
		overdue:   o.maxOverdue,
		base:      base2,
		closeBase: closeBase,
	}
}

// remoteTransport speaks HTTP/2 to host: cleartext (prior knowledge) for
// http://, TLS for https://.
func remoteTransport(host string, o options) *http.Transport {
	var protocols http.Protocols
	if u, err := url.Parse(host); err == nil && u.Scheme == "https" {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Transport{
		Protocols:       &protocols,
		TLSClientConfig: o.tls,
		IdleConnTimeout: idleConnTimeout,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: o.pingAfter,
			PingTimeout:     o.pingTimeout,
		},
	}
}

// headerInterceptor adds the bearer token and the sandbox to every call.
type headerInterceptor struct{ token, sandbox string }

func (h headerInterceptor) set(hd http.Header) {
	hd.Set("Authorization", "Bearer "+h.token)
	if h.sandbox != "" {
		hd.Set(SandboxHeader, h.sandbox)
	}
}

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// sandboxService returns a SandboxService client for host.
func sandboxService(host, token string, o options) (runboxv1connect.SandboxServiceClient, *http.Transport) {
	t := remoteTransport(host, o)
	return runboxv1connect.NewSandboxServiceClient(&http.Client{Transport: t}, strings.TrimRight(host, "/"),
		connect.WithCodec(protoCodec{}), connect.WithInterceptors(headerInterceptor{token: token})), t
}

// checkHost refuses a host that is not an http:// or https:// URL.
func checkHost(host string) error {
	u, err := url.Parse(host)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("runbox serve address %q: want http://HOST:PORT or https://HOST:PORT", host)
	}
	return nil
}
