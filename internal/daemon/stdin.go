package daemon

import (
	"context"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// WriteStdin writes to the stdin of an exec started with stdin_stream.
func (s *Server) WriteStdin(_ context.Context, req *connect.Request[runboxv1.WriteStdinRequest]) (*connect.Response[runboxv1.WriteStdinResponse], error) {
	if err := runbox.CheckSize("stdin chunk", int64(len(req.Msg.GetData())), runbox.MaxStdinChunkBytes, "runbox.MaxStdinChunkBytes"); err != nil {
		return nil, s.rpcError("write stdin", err)
	}
	e, err := s.sup.Get(req.Msg.GetId())
	if err != nil {
		return nil, s.rpcError("write stdin", err)
	}
	if err := e.WriteStdin(req.Msg.GetData()); err != nil {
		return nil, s.rpcError("write stdin", err)
	}
	return connect.NewResponse(&runboxv1.WriteStdinResponse{}), nil
}

// CloseStdin closes an exec's stdin.
func (s *Server) CloseStdin(_ context.Context, req *connect.Request[runboxv1.CloseStdinRequest]) (*connect.Response[runboxv1.CloseStdinResponse], error) {
	e, err := s.sup.Get(req.Msg.GetId())
	if err != nil {
		return nil, s.rpcError("close stdin", err)
	}
	if err := e.CloseStdin(); err != nil {
		return nil, s.rpcError("close stdin", err)
	}
	return connect.NewResponse(&runboxv1.CloseStdinResponse{}), nil
}
