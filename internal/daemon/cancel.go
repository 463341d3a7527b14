package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// Cancel stops an exec with the stop protocol and answers once it has
// stopped (or the request's context ends). For an unknown id it leaves a
// tombstone and answers known=false at once. A negative grace means none
// (SIGKILL at once).
func (s *Server) Cancel(ctx context.Context, req *connect.Request[runboxv1.CancelRequest]) (*connect.Response[runboxv1.CancelResponse], error) {
	e, known := s.sup.Cancel(req.Msg.GetId(), wire.MsToDuration(req.Msg.GetGraceMs()))
	if e != nil {
		if err := e.WaitStopped(ctx); err != nil {
			return nil, s.rpcError("cancel", err)
		}
	}
	return connect.NewResponse(&runboxv1.CancelResponse{Known: known}), nil
}
