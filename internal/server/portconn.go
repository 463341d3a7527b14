package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// dialPortStream opens one connection to port on a sandbox's loopback through
// its runboxd's ForwardService, and returns it once the port answered
// (an error naming the port when nothing listens there). The connection
// lives until closed or until ctx ends.
func dialPortStream(ctx context.Context, fc runboxv1connect.ForwardServiceClient, port int) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream := fc.Forward(ctx)
	if err := stream.Send(&runboxv1.ForwardRequest{Port: uint32(port)}); err != nil {
		cancel()
		return nil, fmt.Errorf("forward to port %d: %w", port, err)
	}
	if _, err := stream.Receive(); err != nil { // the port answered, or not
		cancel()
		stream.CloseResponse()
		if ce := new(connect.Error); errors.As(err, &ce) {
			return nil, fmt.Errorf("port %d: %s", port, ce.Message())
		}
		return nil, fmt.Errorf("forward to port %d: %w", port, err)
	}
	return &streamConn{stream: stream, cancel: cancel}, nil
}

// streamConn is a net.Conn over one ForwardService stream. Deadlines are
// not supported (the stream's context bounds it).
type streamConn struct {
	stream *connect.BidiStreamForClient[runboxv1.ForwardRequest, runboxv1.ForwardResponse]
	cancel context.CancelFunc

	rmu  sync.Mutex
	rbuf []byte
	reof bool

	wmu       sync.Mutex
	closeOnce sync.Once
}

func (c *streamConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.rbuf) == 0 {
		if c.reof {
			return 0, io.EOF
		}
		msg, err := c.stream.Receive()
		if err != nil {
			c.reof = true
			return 0, io.EOF
		}
		c.rbuf = msg.GetData()
		if msg.GetCloseWrite() {
			c.reof = true
		}
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

func (c *streamConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		b := p[:min(len(p), forwardChunk)]
		// Send keeps no reference to b after it returns.
		if err := c.stream.Send(&runboxv1.ForwardRequest{Data: b}); err != nil {
			return n, fmt.Errorf("write to the sandbox's port: %w", err)
		}
		n += len(b)
		p = p[len(b):]
	}
	return n, nil
}

// CloseWrite half-closes the connection: the server in the sandbox reads
// its end.
func (c *streamConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.stream.CloseRequest()
}

func (c *streamConn) Close() error {
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		c.stream.CloseRequest()
		c.wmu.Unlock()
		c.cancel()
		c.stream.CloseResponse()
	})
	return nil
}

// forwardChunk bounds one message's data.
const forwardChunk = 256 << 10

func (c *streamConn) LocalAddr() net.Addr                { return portAddr{} }
func (c *streamConn) RemoteAddr() net.Addr               { return portAddr{} }
func (c *streamConn) SetDeadline(t time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return nil }

type portAddr struct{}

func (portAddr) Network() string { return "runbox-forward" }
func (portAddr) String() string  { return "sandbox" }
