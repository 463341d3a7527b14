package daemon

import (
	"context"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// Cancel stops an exec with the stop protocol and answers once it has
// stopped (or the request's context ends). For an unknown id it leaves a
// tombstone and answers known=false at once. A negative grace means none
// (SIGKILL at once).
func (s *Server) Cancel(ctx context.Context, req *connect.Request[runboxv1.CancelRequest]) (*connect.Response[runboxv1.CancelResponse], error) {
	if err := runbox.CheckMs("grace", req.Msg.GetGraceMs(), runbox.MaxGrace, "runbox.MaxGrace", true); err != nil {
		return nil, s.rpcError("cancel", err)
	}
	e, known := s.sup.Cancel(req.Msg.GetId(), wire.GraceFromMs(req.Msg.GetGraceMs()))
	if e != nil {
		if err := e.WaitStopped(ctx); err != nil {
			return nil, s.rpcError("cancel", err)
		}
	}
	return connect.NewResponse(&runboxv1.CancelResponse{Known: known}), nil
}
