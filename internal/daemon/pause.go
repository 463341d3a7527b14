package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Pause freezes every exec's processes and stops their clocks.
func (s *Server) Pause(context.Context, *connect.Request[runboxv1.PauseRequest]) (*connect.Response[runboxv1.PauseResponse], error) {
	if err := s.sup.Pause(); err != nil {
		return nil, s.rpcError("pause", err)
	}
	return connect.NewResponse(&runboxv1.PauseResponse{}), nil
}

// Resume thaws what Pause froze.
func (s *Server) Resume(context.Context, *connect.Request[runboxv1.ResumeRequest]) (*connect.Response[runboxv1.ResumeResponse], error) {
	if err := s.sup.Resume(); err != nil {
		return nil, s.rpcError("resume", err)
	}
	return connect.NewResponse(&runboxv1.ResumeResponse{}), nil
}
