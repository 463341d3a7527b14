package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Remove removes a path, a tree when recursive.
func (fs *filesServer) Remove(_ context.Context, req *connect.Request[runboxv1.RemoveRequest]) (*connect.Response[runboxv1.RemoveResponse], error) {
	fsys, err := fs.open(req.Msg.GetRoot())
	if err != nil {
		return nil, fs.s.rpcError("remove", err)
	}
	defer fsys.Close()
	if err := fsys.Remove(req.Msg.GetPath(), req.Msg.GetRecursive()); err != nil {
		return nil, fs.s.rpcError("remove", err)
	}
	return connect.NewResponse(&runboxv1.RemoveResponse{}), nil
}
