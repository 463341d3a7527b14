package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// ListSessions describes the shell sessions, by name.
func (s *Server) ListSessions(context.Context, *connect.Request[runboxv1.ListSessionsRequest]) (*connect.Response[runboxv1.ListSessionsResponse], error) {
	sessions := s.sup.Sessions()
	resp := &runboxv1.ListSessionsResponse{Sessions: make([]*runboxv1.Session, len(sessions))}
	for i, ss := range sessions {
		resp.Sessions[i] = wire.SessionToProto(ss)
	}
	return connect.NewResponse(resp), nil
}

// DeleteSession forgets a shell session.
func (s *Server) DeleteSession(_ context.Context, req *connect.Request[runboxv1.DeleteSessionRequest]) (*connect.Response[runboxv1.DeleteSessionResponse], error) {
	if err := s.sup.DeleteSession(req.Msg.GetName()); err != nil {
		return nil, s.rpcError("delete session", err)
	}
	return connect.NewResponse(&runboxv1.DeleteSessionResponse{}), nil
}
