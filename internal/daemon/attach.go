package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/supervisor"
)

// Attach follows an existing exec: a started event (attached), output from
// from_seq when asked, and the exited event.
func (s *Server) Attach(ctx context.Context, req *connect.Request[runboxv1.AttachRequest], stream *connect.ServerStream[runboxv1.ExecEvent]) error {
	e, err := s.sup.Get(req.Msg.GetId())
	if err != nil {
		return s.rpcError("attach", err)
	}
	var r *supervisor.OutputReader
	if req.Msg.GetStreamOutput() {
		r = e.Output(req.Msg.GetFromSeq())
		defer r.Close()
	}
	return follow(ctx, e, true, r, stream)
}
