package daemon

import (
	"context"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/files"
)

// PutArchive extracts a tar stream under a directory, after the header's
// deletions.
func (fs *filesServer) PutArchive(_ context.Context, stream *connect.ClientStream[runboxv1.PutArchiveRequest]) (*connect.Response[runboxv1.PutArchiveResponse], error) {
	if !stream.Receive() {
		return nil, fs.s.rpcError("put archive", fmt.Errorf("put archive: %w: no header", runbox.ErrInvalidSpec))
	}
	h := stream.Msg().GetHeader()
	if h == nil {
		return nil, fs.s.rpcError("put archive", fmt.Errorf("put archive: %w: first message is not a header", runbox.ErrInvalidSpec))
	}
	fsys, err := fs.open(h.GetRoot())
	if err != nil {
		return nil, fs.s.rpcError("put archive", err)
	}
	defer fsys.Close()
	dir, err := fsys.Sub(h.GetPath(), true)
	if err != nil {
		return nil, fs.s.rpcError("put archive", err)
	}
	defer dir.Close()
	del := make([]string, len(h.GetDelete()))
	for i, d := range h.GetDelete() {
		del[i] = string(d)
	}
	r := dataReader[runboxv1.PutArchiveRequest](stream)
	chtimes := make([]runbox.FileInfo, len(h.GetChtimes()))
	for i, c := range h.GetChtimes() {
		chtimes[i] = wire.FileInfoFromProto(c)
	}
	st, err := dir.Extract(r, files.ExtractOptions{Delete: del, Chtimes: chtimes, Cache: fs.cache})
	if err != nil {
		return nil, fs.s.rpcError("put archive", err)
	}
	// Read what follows the archive's end marker, so the client's last
	// messages are not refused.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, fs.s.rpcError("put archive", fmt.Errorf("put archive: %w", err))
	}
	return connect.NewResponse(&runboxv1.PutArchiveResponse{
		Files: st.Files, Dirs: st.Dirs, Links: st.Links, Bytes: st.Bytes, Deleted: st.Deleted,
	}), nil
}
