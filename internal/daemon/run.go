package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/supervisor"
)

// Run starts an exec (or attaches to the one with the same id) and streams
// started, output when asked, and exited. If the client goes away the
// handler returns; the exec keeps running, unless it asked to be cancelled
// on disconnect and no other client follows it.
func (s *Server) Run(ctx context.Context, req *connect.Request[runboxv1.RunRequest], stream *connect.ServerStream[runboxv1.ExecEvent]) error {
	releaser.afterLarge(proto.Size(req.Msg))
	spec, err := wire.SpecFromProto(req.Msg.GetSpec())
	if err != nil {
		return s.rpcError("run", err)
	}
	if !req.Msg.GetStreamOutput() {
		e, attached, err := s.sup.Start(spec)
		if err != nil {
			return s.rpcError("run", err)
		}
		return follow(ctx, e, attached, nil, stream)
	}
	// The reader exists before the command runs, so flow control holds the
	// command's first bytes for this client.
	e, r, attached, err := s.sup.StartFollowing(spec)
	if err != nil {
		return s.rpcError("run", err)
	}
	defer r.Close()
	return follow(ctx, e, attached, r, stream)
}

// follow sends the started event, then (when r is not nil) every output
// event r reads, then the exited event once the result is final. The exec
// counts the stream as a follower meanwhile (see supervisor.Exec.Follow). A failed
// send returns a tagged error (see sendFailed), so a client that can still
// read it knows the daemon answered.
func follow(ctx context.Context, e *supervisor.Exec, attached bool, r *supervisor.OutputReader, stream *connect.ServerStream[runboxv1.ExecEvent]) (err error) {
	leave := e.Follow()
	defer func() { leave(err == nil) }()
	var raw *rawOutput
	if r != nil {
		raw = newRawOutput(ctx, stream)
	}
	if err := stream.Send(startedEvent(e, attached)); err != nil {
		return sendFailed(ctx, e, "started event", err)
	}
	if r != nil {
		if err := sendOutput(ctx, e, r, raw, stream); err != nil {
			return err
		}
	}
	select {
	case <-e.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := stream.Send(exitedEvent(e)); err != nil {
		return sendFailed(ctx, e, "result", err)
	}
	return nil
}

// outputBatchBytes bounds the chunk bytes sent in one batch: a quarter of
// the default replay ring (supervisor.DefaultRingBytes), as one full pipe
// read is, so that while a batch is written (the store keeps it until the
// next call, in case the send fails) the pipe's reader still has room to
// keep reading. Half the ring made the reader wait for the stream: 1.5–2×
// the context switches in a local sandbox (docs/performance.md).
const outputBatchBytes = 256 << 10

// sendOutput sends every output event r reads until its end: each batch
// of events that are ready together ([supervisor.OutputReader.NextBatch])
// in one write when the response is Connect's protobuf (raw, see
// rawoutput.go), one Send each otherwise.
func sendOutput(ctx context.Context, e *supervisor.Exec, r *supervisor.OutputReader, raw *rawOutput, stream *connect.ServerStream[runboxv1.ExecEvent]) error {
	var evs []supervisor.OutputEvent
	for {
		var err error
		evs, err = r.NextBatch(ctx, evs[:0], outputBatchBytes)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw != nil {
			err = raw.sendBatch(stream, evs)
		} else {
			for _, ev := range evs {
				if err = stream.Send(outputEvent(ev)); err != nil {
					break
				}
			}
		}
		if err != nil {
			return sendFailed(ctx, e, "output", err)
		}
	}
}

// sendFailed is the error a stream handler returns when it could not send
// an event. A broken connection or a gone client leaves no one to read it;
// anything else (an event that cannot be encoded) would be read by the
// client, and connect's untagged Internal code would look like a transport
// failure to retry until the sandbox is declared lost. So it goes back
// tagged: an internal error of a daemon that answered.
func sendFailed(ctx context.Context, e *supervisor.Exec, what string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	ce := connect.NewError(connect.CodeInternal, fmt.Errorf("exec %s: send %s: %w", e.ID(), what, err))
	ce.Meta().Set(wire.ErrorKey, wire.TagInternal)
	return ce
}
