package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Move renames a path.
func (fs *filesServer) Move(_ context.Context, req *connect.Request[runboxv1.MoveRequest]) (*connect.Response[runboxv1.MoveResponse], error) {
	fsys, err := fs.open(req.Msg.GetRoot())
	if err != nil {
		return nil, fs.s.rpcError("move", err)
	}
	defer fsys.Close()
	if err := fsys.Move(req.Msg.GetFrom(), req.Msg.GetTo()); err != nil {
		return nil, fs.s.rpcError("move", err)
	}
	return connect.NewResponse(&runboxv1.MoveResponse{}), nil
}
