package daemon

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/supervisor"
)

// The HTTP/1 output path. A Run stream over HTTP/1 (the runbox front's)
// writes each Output envelope itself, in one write of one buffer, instead of
// through Connect's Send: Connect marshals the event into a pooled buffer
// (a copy of the chunk), then writes the 5-byte prefix and the message
// separately into net/http's 2 KiB and 4 KiB buffered writers, and the
// chunked encoding adds a size line and a CRLF: about 2.5 write calls per
// chunk, each a wake-up of the reader, and each envelope split across HTTP
// chunks, which the reader then gathers. Here the response is sent without
// chunking (Transfer-Encoding: identity; the connection closes after it,
// and Connect's end-of-stream message still ends the stream), so one
// Write of a buffer larger than net/http's goes straight to the socket.
// The Outputs of one batch (every chunk ready when the stream comes back,
// see sendOutput) go one behind another in that one write.
// Every other event (started, gap, exited) and the end of the stream still
// go through Connect, on the same goroutine, so their order is kept.
//
// Over HTTP/2 (the Go client's) the Outputs of a batch are likewise
// written one behind another, copied into one buffer, with one
// ResponseWriter.Write and a Flush: the HTTP/2 server then hands the
// batch to its connection's writer once and sends it as one DATA frame
// (the client reads frames of up to wire.MaxFrameBytes). Through
// Connect's Send, each Output took two hand-offs to that writer and two
// DATA frames, one of them 4 KiB: the 5-byte prefix went into the
// response's 4 KiB buffer, which the message then filled and flushed
// before the rest went on its own. The stream's own framing (chunked
// encoding, identity) and socket are the HTTP/2 server's: only HTTP/1
// writes to the socket itself.

// sendBufferBytes is the socket send buffer asked for on each accepted
// connection: four of the supervisor's largest chunks, so that writing one
// Output envelope seldom stops halfway for the client to read (the default,
// net.core.wmem_default, is often 208 KiB, less than one envelope of a
// full read). The kernel caps it at net.core.wmem_max.
const sendBufferBytes = 1 << 20

// widenSendBuffers returns ln, asking for sendBufferBytes on each
// connection it accepts (a failure leaves the default).
func widenSendBuffers(ln net.Listener) net.Listener { return sendBufferListener{ln} }

type sendBufferListener struct{ net.Listener }

func (l sendBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if b, ok := c.(interface{ SetWriteBuffer(int) error }); ok && err == nil {
		_ = b.SetWriteBuffer(sendBufferBytes)
	}
	return c, err
}

// rawKey is the context key of a Run or Attach request's rawWriter.
type rawKey struct{}

// rawWriter is a Run or Attach request's ResponseWriter and the major
// version of the HTTP it came over.
type rawWriter struct {
	w     http.ResponseWriter
	major int
}

// withRawOutput hands the ResponseWriter of Run requests over HTTP/1 and
// of Run and Attach requests over HTTP/2 to their handler through the
// request's context. (An HTTP/1 response's framing is changed for its
// writes: Attach over HTTP/1, whose follower may not expect the
// connection to close after it, keeps Connect's.)
func withRawOutput(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == runboxv1connect.RunboxServiceRunProcedure,
			r.ProtoMajor == 2 && r.URL.Path == runboxv1connect.RunboxServiceAttachProcedure:
			r = r.WithContext(context.WithValue(r.Context(), rawKey{}, rawWriter{w, r.ProtoMajor}))
		}
		h.ServeHTTP(w, r)
	})
}

// connKey is the context key of the connection a request came on
// (http.Server.ConnContext).
type connKey struct{}

// withConn keeps c in the context of the requests that come on it.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// copyBelowBytes is the size under which a chunk is copied behind its
// envelope's header rather than written from where it lies: a copy of a
// few KiB costs less than an iovec of its own, and a batch of many small
// chunks stays within writev's 1,024 iovecs.
const copyBelowBytes = 2 << 10

// rawOutput writes Output envelopes straight to an HTTP/1 or HTTP/2
// response.
type rawOutput struct {
	w http.ResponseWriter
	f http.Flusher
	// sock is the socket under the connection's wrappers (daemonauth's,
	// fdpass's), which pass writes through unchanged: the envelopes go to
	// it in one writev each batch, each chunk from where it lies. nil
	// over HTTP/2, or when the connection is not one runboxd's listener
	// made: the envelopes are then copied into buf and written through w.
	sock net.Conn
	// viaW says bytes went through w since the last write to sock: w is
	// flushed before sock is written, so the bytes keep their order.
	viaW bool
	buf  []byte      // the headers (and the small chunks behind them), reused
	from int         // buf[from:] is not in iov yet
	iov  net.Buffers // what the next write to sock sends
}

// newRawOutput returns the raw writer for stream's response, or nil when
// withRawOutput did not hand over its ResponseWriter, or the response is
// not Connect's protobuf or is compressed (Connect then frames what it
// writes differently: JSON, the Python SDK's local mode; gRPC). It must be
// called before the first event is sent: over HTTP/1 it sets the
// response's transfer encoding.
func newRawOutput(ctx context.Context, stream *connect.ServerStream[runboxv1.ExecEvent]) *rawOutput {
	rw, ok := ctx.Value(rawKey{}).(rawWriter)
	if !ok {
		return nil
	}
	f, ok := rw.w.(http.Flusher)
	h := stream.ResponseHeader()
	if !ok || h.Get("Content-Type") != "application/connect+proto" || h.Get("Connect-Content-Encoding") != "" {
		return nil
	}
	o := &rawOutput{w: rw.w, f: f, viaW: true}
	if rw.major != 1 {
		return o // HTTP/2 frames the response itself
	}
	h.Set("Transfer-Encoding", "identity")
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		o.sock = socketOf(c)
	}
	return o
}

// socketOf returns the socket under c's wrappers, or nil when c is not a
// socket wrapped only by connections that write what they are given
// unchanged (a NetConn method, as daemonauth's and fdpass's have; never
// TLS's, which encrypts it).
func socketOf(c net.Conn) net.Conn {
	for range 8 {
		switch x := c.(type) {
		case *net.UnixConn, *net.TCPConn:
			return c
		case *tls.Conn:
			return nil
		case interface{ NetConn() net.Conn }:
			if c = x.NetConn(); c == nil {
				return nil
			}
		default:
			return nil
		}
	}
	return nil
}

// sendBatch writes evs in order: each run of Outputs as their envelopes
// one behind another in one write, anything else through Connect.
func (o *rawOutput) sendBatch(stream *connect.ServerStream[runboxv1.ExecEvent], evs []supervisor.OutputEvent) error {
	for _, ev := range evs {
		if ev.Chunk != nil {
			if err := o.add(*ev.Chunk); err != nil {
				return err
			}
			continue
		}
		if err := o.flush(); err != nil {
			return err
		}
		if err := stream.Send(outputEvent(ev)); err != nil {
			return err
		}
		o.viaW = true
	}
	return o.flush()
}

// add appends c's envelope to the write being gathered: its header in buf,
// its data behind it (copied when small, or without a socket) or as an
// iovec of its own.
func (o *rawOutput) add(c runbox.Chunk) error {
	buf, err := wire.AppendOutputHeader(o.buf, c)
	if err != nil {
		return err
	}
	o.buf = buf
	if o.sock == nil || len(c.Data) < copyBelowBytes {
		o.buf = append(o.buf, c.Data...)
		return nil
	}
	// A slice of buf stays valid when buf grows: it keeps the array it
	// was cut from, which append never writes below len(buf).
	o.iov = append(o.iov, o.buf[o.from:], c.Data)
	o.from = len(o.buf)
	return nil
}

// flush writes the envelopes gathered, if any: to the socket in one
// writev, or through w.
func (o *rawOutput) flush() error {
	defer func() {
		clear(o.iov) // let go of the chunks
		o.buf, o.from, o.iov = o.buf[:0], 0, o.iov[:0]
	}()
	if o.sock == nil {
		if len(o.buf) == 0 {
			return nil
		}
		if _, err := o.w.Write(o.buf); err != nil {
			return err
		}
		o.f.Flush()
		return nil
	}
	if o.from < len(o.buf) {
		o.iov = append(o.iov, o.buf[o.from:])
	}
	if len(o.iov) == 0 {
		return nil
	}
	if o.viaW {
		// What Connect wrote (the headers, a started or gap event) goes
		// out first.
		if err := http.NewResponseController(o.w).Flush(); err != nil {
			return err
		}
		o.viaW = false
	}
	v := o.iov // WriteTo consumes its receiver
	_, err := v.WriteTo(o.sock)
	return err
}
