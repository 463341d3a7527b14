package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// Stat describes a path.
func (fs *filesServer) Stat(_ context.Context, req *connect.Request[runboxv1.StatRequest]) (*connect.Response[runboxv1.StatResponse], error) {
	fsys, err := fs.open(req.Msg.GetRoot())
	if err != nil {
		return nil, fs.s.rpcError("stat", err)
	}
	defer fsys.Close()
	info, err := fsys.Stat(req.Msg.GetPath(), req.Msg.GetFollowLinks())
	if err != nil {
		return nil, fs.s.rpcError("stat", err)
	}
	return connect.NewResponse(&runboxv1.StatResponse{Info: wire.FileInfoToProto(info)}), nil
}
