package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// List describes every exec the daemon keeps, oldest first, with each
// retained result's output unless the request omits it.
func (s *Server) List(_ context.Context, req *connect.Request[runboxv1.ListRequest]) (*connect.Response[runboxv1.ListResponse], error) {
	infos := s.sup.List()
	omit := req.Msg.GetOmitOutput()
	resp := &runboxv1.ListResponse{Execs: make([]*runboxv1.ExecInfo, len(infos))}
	for i, info := range infos {
		if omit && info.Result != nil {
			r := *info.Result
			r.Stdout, r.Stderr = nil, nil
			info.Result = &r
		}
		resp.Execs[i] = wire.ExecInfoToProto(info)
	}
	return connect.NewResponse(resp), nil
}
