package daemon

import (
	"context"
	"net"
	"net/http"

	"connectrpc.com/connect"

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

// rawKey is the context key of a Run request's HTTP/1 ResponseWriter.
type rawKey struct{}

// withRawOutput hands HTTP/1 Run requests' ResponseWriter to the Run
// handler through the request's context.
func withRawOutput(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && r.URL.Path == runboxv1connect.RunboxServiceRunProcedure {
			r = r.WithContext(context.WithValue(r.Context(), rawKey{}, w))
		}
		h.ServeHTTP(w, r)
	})
}

// rawOutput writes Output envelopes straight to an HTTP/1 response.
type rawOutput struct {
	w   http.ResponseWriter
	f   http.Flusher
	buf []byte // the envelope being written, reused
}

// newRawOutput returns the raw writer for stream's response, or nil when
// the request came over HTTP/2, or the response is JSON or compressed
// (Connect then frames what it writes differently). It must be called before the first
// event is sent: it sets the response's transfer encoding.
func newRawOutput(ctx context.Context, stream *connect.ServerStream[runboxv1.ExecEvent]) *rawOutput {
	w, ok := ctx.Value(rawKey{}).(http.ResponseWriter)
	if !ok {
		return nil
	}
	f, ok := w.(http.Flusher)
	h := stream.ResponseHeader()
	if !ok || h.Get("Content-Type") != "application/connect+proto" || h.Get("Connect-Content-Encoding") != "" {
		return nil // JSON (the Python SDK's local mode), or compressed
	}
	stream.ResponseHeader().Set("Transfer-Encoding", "identity")
	return &rawOutput{w: w, f: f}
}

// sendBatch writes evs in order: each run of Outputs as their envelopes
// one behind another in one write, anything else through Connect.
func (o *rawOutput) sendBatch(stream *connect.ServerStream[runboxv1.ExecEvent], evs []supervisor.OutputEvent) error {
	o.buf = o.buf[:0]
	for _, ev := range evs {
		if ev.Chunk != nil {
			buf, err := wire.AppendOutputEnvelope(o.buf, *ev.Chunk)
			if err != nil {
				return err
			}
			o.buf = buf
			continue
		}
		if err := o.flush(); err != nil {
			return err
		}
		if err := stream.Send(outputEvent(ev)); err != nil {
			return err
		}
	}
	return o.flush()
}

// flush writes the envelopes gathered in buf, if any.
func (o *rawOutput) flush() error {
	if len(o.buf) == 0 {
		return nil
	}
	_, err := o.w.Write(o.buf)
	o.buf = o.buf[:0]
	if err != nil {
		return err
	}
	o.f.Flush()
	return nil
}
