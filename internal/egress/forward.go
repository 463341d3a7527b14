package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// forwardDialTimeout bounds runboxd's connect to a port on its loopback.
const forwardDialTimeout = 5 * time.Second

// Forwarder is runboxd's half of port forwarding: it connects to a port on
// the sandbox's loopback for each Forward call and splices it. It opens no
// listener: only a caller holding the sandbox's secret reaches it.
type Forwarder struct {
	// Stop, closed, cuts every forwarded connection (a stopping daemon).
	Stop <-chan struct{}
}

var _ runboxv1connect.ForwardServiceHandler = Forwarder{}

// Handler returns the ForwardService's path and handler.
func (f Forwarder) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return runboxv1connect.NewForwardServiceHandler(f, append(opts, noGzip)...)
}

// Forward carries one connection to 127.0.0.1:port in the sandbox.
func (f Forwarder) Forward(ctx context.Context, stream *connect.BidiStream[runboxv1.ForwardRequest, runboxv1.ForwardResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	port := first.GetPort()
	if port == 0 || port > 65535 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("port %d: want 1 to 65535", port))
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, forwardDialTimeout)
	conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	cancel()
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("nothing answers on port %d in the sandbox: %w", port, err))
	}
	defer conn.Close()
	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-f.Stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	// Tell the caller the port answered.
	if err := stream.Send(&runboxv1.ForwardResponse{}); err != nil {
		return nil
	}
	if len(first.GetData()) > 0 {
		if _, err := conn.Write(first.GetData()); err != nil {
			return nil
		}
	}
	in := make(chan struct{})
	go func() {
		defer close(in)
		for {
			msg, err := stream.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) {
					closeWrite(conn)
				} else {
					conn.Close()
				}
				return
			}
			if _, err := conn.Write(msg.GetData()); err != nil {
				conn.Close()
				return
			}
		}
	}()
	buf := make([]byte, chunk)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if serr := stream.Send(&runboxv1.ForwardResponse{Data: buf[:n]}); serr != nil {
				conn.Close()
				break
			}
		}
		if err != nil {
			stream.Send(&runboxv1.ForwardResponse{CloseWrite: true})
			break
		}
	}
	select {
	case <-in:
	case <-ctx.Done():
	}
	return nil
}

// NewForwardClient returns a ForwardService client over the sandbox's
// authenticated streams from dial, and what closes its idle connections.
func NewForwardClient(dial runbox.Dialer) (runboxv1connect.ForwardServiceClient, func()) {
	t := h2cTransport(dial)
	return runboxv1connect.NewForwardServiceClient(&http.Client{Transport: t}, "http://runboxd", noGzipClient), t.CloseIdleConnections
}

// noGzip takes gzip out of what a carrying stream's two ends offer each
// other: Connect compresses every message of a response when the client
// accepts gzip, which cost more than half of a forwarded connection's CPU
// (56 MB/s) on bytes that are mostly TLS records, incompressible anyway.
var (
	noGzip       = connect.WithCompression("gzip", nil, nil)
	noGzipClient = connect.WithAcceptCompression("gzip", nil, nil)
)

// h2cTransport speaks HTTP/2 cleartext over connections from dial.
func h2cTransport(dial runbox.Dialer) *http.Transport {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &http.Transport{
		Protocols: &protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second,
			// Bulk data in large frames, as runboxd's own server reads them.
			MaxReadFrameSize:              wire.MaxFrameBytes,
			MaxReceiveBufferPerStream:     wire.StreamWindowBytes,
			MaxReceiveBufferPerConnection: wire.ConnWindowBytes},
	}
}

// ForwardConn carries conn, a connection the caller accepted, to port on
// the sandbox's loopback, and returns when both directions have ended. It
// closes conn.
func ForwardConn(ctx context.Context, c runboxv1connect.ForwardServiceClient, port int, conn net.Conn) error {
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.Forward(ctx)
	defer stream.CloseResponse()
	if err := stream.Send(&runboxv1.ForwardRequest{Port: uint32(port)}); err != nil {
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	if _, err := stream.Receive(); err != nil { // the port answered, or not
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	spliceStream(conn,
		func(b []byte) error { return stream.Send(&runboxv1.ForwardRequest{Data: b}) },
		stream.CloseRequest,
		func() ([]byte, bool, error) {
			resp, err := stream.Receive()
			return resp.GetData(), resp.GetCloseWrite(), err
		})
	return nil
}
