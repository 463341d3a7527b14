package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// ReadFile streams a file's bytes, its info in the first message.
func (fs *filesServer) ReadFile(ctx context.Context, req *connect.Request[runboxv1.ReadFileRequest], stream *connect.ServerStream[runboxv1.ReadFileResponse]) error {
	m := req.Msg
	if m.GetOffset() < 0 || m.GetLength() < 0 {
		return fs.s.rpcError("read file", fmt.Errorf("read %s: %w: negative offset or length", m.GetPath(), runbox.ErrInvalidSpec))
	}
	fsys, err := fs.open(m.GetRoot())
	if err != nil {
		return fs.s.rpcError("read file", err)
	}
	defer fsys.Close()
	f, info, err := fsys.OpenFile(m.GetPath())
	if err != nil {
		return fs.s.rpcError("read file", err)
	}
	defer f.Close()
	var r io.Reader = f
	if m.GetOffset() > 0 {
		if _, err := f.Seek(m.GetOffset(), io.SeekStart); err != nil {
			return fs.s.rpcError("read file", fmt.Errorf("read %s: %w", m.GetPath(), err))
		}
	}
	if m.GetLength() > 0 {
		r = io.LimitReader(f, m.GetLength())
	}
	first := &runboxv1.ReadFileResponse{Info: wire.FileInfoToProto(info)}
	buf := make([]byte, fileChunk)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 || first != nil {
			msg := first
			if msg == nil {
				msg = &runboxv1.ReadFileResponse{}
			}
			first = nil
			msg.Data = buf[:n]
			if serr := stream.Send(msg); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return fs.s.rpcError("read file", fmt.Errorf("read %s: %w", m.GetPath(), err))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
