package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// MakeDir creates a directory.
func (fs *filesServer) MakeDir(_ context.Context, req *connect.Request[runboxv1.MakeDirRequest]) (*connect.Response[runboxv1.MakeDirResponse], error) {
	fsys, err := fs.open(req.Msg.GetRoot())
	if err != nil {
		return nil, fs.s.rpcError("mkdir", err)
	}
	defer fsys.Close()
	perm := wire.ModeFromProto(req.Msg.GetMode())
	if perm == 0 {
		perm = 0o755
	}
	if err := fsys.Mkdir(req.Msg.GetPath(), perm, req.Msg.GetParents()); err != nil {
		return nil, fs.s.rpcError("mkdir", err)
	}
	return connect.NewResponse(&runboxv1.MakeDirResponse{}), nil
}
