package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/files"
)

// GetArchive streams a path as tar.
func (fs *filesServer) GetArchive(_ context.Context, req *connect.Request[runboxv1.GetArchiveRequest], stream *connect.ServerStream[runboxv1.GetArchiveResponse]) error {
	m := req.Msg
	ex, err := files.NewMatcher(m.GetExclude())
	if err != nil {
		return fs.s.rpcError("get archive", err)
	}
	fsys, err := fs.open(m.GetRoot())
	if err != nil {
		return fs.s.rpcError("get archive", err)
	}
	defer fsys.Close()
	entries := make([]string, len(m.GetEntries()))
	for i, e := range m.GetEntries() {
		entries[i] = string(e)
	}
	w := newChunkWriter(func(b []byte) error { return stream.Send(&runboxv1.GetArchiveResponse{Data: b}) })
	if err := fsys.Archive(w, m.GetPath(), files.ArchiveOptions{Name: m.GetName(), Entries: entries, Exclude: ex}); err != nil {
		return fs.s.rpcError("get archive", err)
	}
	return w.Flush()
}
