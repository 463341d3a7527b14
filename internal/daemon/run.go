package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/supervisor"
)

// Run starts an exec (or attaches to the one with the same id) and streams
// started, output when asked, and exited. If the client goes away the
// handler returns; the exec keeps running.
func (s *Server) Run(ctx context.Context, req *connect.Request[runboxv1.RunRequest], stream *connect.ServerStream[runboxv1.ExecEvent]) error {
	e, attached, err := s.sup.Start(wire.SpecFromProto(req.Msg.GetSpec()))
	if err != nil {
		return s.rpcError("run", err)
	}
	return follow(ctx, e, attached, req.Msg.GetStreamOutput(), 1, stream)
}

// follow sends the started event, then (with streamOutput) every output
// event from fromSeq, then the exited event once the result is final.
func follow(ctx context.Context, e *supervisor.Exec, attached, streamOutput bool, fromSeq uint64, stream *connect.ServerStream[runboxv1.ExecEvent]) error {
	if err := stream.Send(startedEvent(e, attached)); err != nil {
		return err
	}
	if streamOutput {
		r := e.Output(fromSeq)
		defer r.Close()
		for {
			ev, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if err := stream.Send(outputEvent(ev)); err != nil {
				return err
			}
		}
	}
	select {
	case <-e.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := stream.Send(exitedEvent(e)); err != nil {
		return fmt.Errorf("exec %s: send result: %w", e.ID(), err)
	}
	return nil
}
