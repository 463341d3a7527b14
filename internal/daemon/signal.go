package daemon

import (
	"context"
	"syscall"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Signal sends a signal to every live process of an exec.
func (s *Server) Signal(_ context.Context, req *connect.Request[runboxv1.SignalRequest]) (*connect.Response[runboxv1.SignalResponse], error) {
	n, err := s.sup.Signal(req.Msg.GetId(), syscall.Signal(req.Msg.GetSignal()))
	if err != nil {
		return nil, s.rpcError("signal", err)
	}
	return connect.NewResponse(&runboxv1.SignalResponse{Signalled: int32(n)}), nil
}
