package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// List describes every exec the daemon keeps, oldest first.
func (s *Server) List(context.Context, *connect.Request[runboxv1.ListRequest]) (*connect.Response[runboxv1.ListResponse], error) {
	infos := s.sup.List()
	resp := &runboxv1.ListResponse{Execs: make([]*runboxv1.ExecInfo, len(infos))}
	for i, info := range infos {
		resp.Execs[i] = wire.ExecInfoToProto(info)
	}
	return connect.NewResponse(resp), nil
}
