package daemon

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/files"
)

// WriteFile writes a file from a header message and data messages.
func (fs *filesServer) WriteFile(_ context.Context, stream *connect.ClientStream[runboxv1.WriteFileRequest]) (*connect.Response[runboxv1.WriteFileResponse], error) {
	if !stream.Receive() {
		return nil, fs.s.rpcError("write file", fmt.Errorf("write file: %w: no header", runbox.ErrInvalidSpec))
	}
	h := stream.Msg().GetHeader()
	if h == nil {
		return nil, fs.s.rpcError("write file", fmt.Errorf("write file: %w: first message is not a header", runbox.ErrInvalidSpec))
	}
	fsys, err := fs.open(h.GetRoot())
	if err != nil {
		return nil, fs.s.rpcError("write file", err)
	}
	defer fsys.Close()
	r := dataReader[runboxv1.WriteFileRequest](stream)
	info, err := fsys.WriteFile(h.GetPath(), r, files.WriteOptions{
		Perm:    wire.ModeFromProto(h.GetMode()),
		Parents: h.GetCreateParents(),
		InPlace: h.GetInPlace(),
	})
	if err != nil {
		return nil, fs.s.rpcError("write file", err)
	}
	return connect.NewResponse(&runboxv1.WriteFileResponse{Info: wire.FileInfoToProto(info)}), nil
}
