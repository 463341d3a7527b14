package daemon

import (
	"context"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/files"
)

// Manifest streams a tree's manifest for sync.
func (fs *filesServer) Manifest(ctx context.Context, req *connect.Request[runboxv1.ManifestRequest], stream *connect.ServerStream[runboxv1.ManifestResponse]) error {
	m := req.Msg
	ex, err := files.NewMatcher(m.GetExclude())
	if err != nil {
		return fs.s.rpcError("manifest", err)
	}
	fsys, err := fs.open(m.GetRoot())
	if err != nil {
		return fs.s.rpcError("manifest", err)
	}
	defer fsys.Close()
	b := &batcher{ctx: ctx, send: func(e []*runboxv1.FileInfo) error {
		return stream.Send(&runboxv1.ManifestResponse{Entries: e})
	}}
	err = fsys.Manifest(m.GetPath(), ex, fs.cache, func(fi runbox.FileInfo) error { return b.add(wire.FileInfoToProto(fi)) })
	if err != nil {
		return fs.s.rpcError("manifest", err)
	}
	return b.flush(true)
}
