package daemon

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// ListDir streams a directory's entries in batches.
func (fs *filesServer) ListDir(ctx context.Context, req *connect.Request[runboxv1.ListDirRequest], stream *connect.ServerStream[runboxv1.ListDirResponse]) error {
	m := req.Msg
	if m.GetDepth() < 0 {
		return fs.s.rpcError("list", fmt.Errorf("list %s: %w: negative depth", m.GetPath(), runbox.ErrInvalidSpec))
	}
	depth := 1
	if m.GetRecursive() {
		depth = int(m.GetDepth())
	}
	fsys, err := fs.open(m.GetRoot())
	if err != nil {
		return fs.s.rpcError("list", err)
	}
	defer fsys.Close()
	b := &batcher{ctx: ctx, send: func(e []*runboxv1.FileInfo) error {
		return stream.Send(&runboxv1.ListDirResponse{Entries: e})
	}}
	if err := fsys.List(m.GetPath(), depth, func(fi runbox.FileInfo) error { return b.add(wire.FileInfoToProto(fi)) }); err != nil {
		return fs.s.rpcError("list", err)
	}
	return b.flush(true)
}

// batcher sends FileInfos entryBatch at a time.
type batcher struct {
	ctx     context.Context
	send    func([]*runboxv1.FileInfo) error
	entries []*runboxv1.FileInfo
	sent    bool
}

func (b *batcher) add(fi *runboxv1.FileInfo) error {
	b.entries = append(b.entries, fi)
	if len(b.entries) >= entryBatch {
		return b.flush(false)
	}
	return nil
}

// flush sends the batch; with last, also an empty one when nothing was
// sent at all, so the client sees the stream succeed.
func (b *batcher) flush(last bool) error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	if len(b.entries) == 0 && (b.sent || !last) {
		return nil
	}
	err := b.send(b.entries)
	b.entries, b.sent = nil, true
	return err
}
