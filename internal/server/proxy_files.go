package server

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// filesProxy implements runboxv1connect.FilesServiceHandler by forwarding
// every call to the sandbox's runboxd.
type filesProxy struct{ s *Server }

func (p *filesProxy) ReadFile(ctx context.Context, req *connect.Request[runboxv1.ReadFileRequest], out *connect.ServerStream[runboxv1.ReadFileResponse]) error {
	return forwardServerStream(p.s, ctx, req, out, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ReadFileRequest]) (*connect.ServerStreamForClient[runboxv1.ReadFileResponse], error) {
		return u.files.ReadFile
	})
}

func (p *filesProxy) WriteFile(ctx context.Context, in *connect.ClientStream[runboxv1.WriteFileRequest]) (*connect.Response[runboxv1.WriteFileResponse], error) {
	return forwardClientStream(p.s, ctx, in, func(u *upstream) func(context.Context) *connect.ClientStreamForClient[runboxv1.WriteFileRequest, runboxv1.WriteFileResponse] {
		return u.files.WriteFile
	})
}

func (p *filesProxy) Stat(ctx context.Context, req *connect.Request[runboxv1.StatRequest]) (*connect.Response[runboxv1.StatResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.StatRequest]) (*connect.Response[runboxv1.StatResponse], error) {
		return u.files.Stat
	})
}

func (p *filesProxy) ListDir(ctx context.Context, req *connect.Request[runboxv1.ListDirRequest], out *connect.ServerStream[runboxv1.ListDirResponse]) error {
	return forwardServerStream(p.s, ctx, req, out, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ListDirRequest]) (*connect.ServerStreamForClient[runboxv1.ListDirResponse], error) {
		return u.files.ListDir
	})
}

func (p *filesProxy) MakeDir(ctx context.Context, req *connect.Request[runboxv1.MakeDirRequest]) (*connect.Response[runboxv1.MakeDirResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.MakeDirRequest]) (*connect.Response[runboxv1.MakeDirResponse], error) {
		return u.files.MakeDir
	})
}

func (p *filesProxy) Remove(ctx context.Context, req *connect.Request[runboxv1.RemoveRequest]) (*connect.Response[runboxv1.RemoveResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.RemoveRequest]) (*connect.Response[runboxv1.RemoveResponse], error) {
		return u.files.Remove
	})
}

func (p *filesProxy) Move(ctx context.Context, req *connect.Request[runboxv1.MoveRequest]) (*connect.Response[runboxv1.MoveResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.MoveRequest]) (*connect.Response[runboxv1.MoveResponse], error) {
		return u.files.Move
	})
}

func (p *filesProxy) PutArchive(ctx context.Context, in *connect.ClientStream[runboxv1.PutArchiveRequest]) (*connect.Response[runboxv1.PutArchiveResponse], error) {
	return forwardClientStream(p.s, ctx, in, func(u *upstream) func(context.Context) *connect.ClientStreamForClient[runboxv1.PutArchiveRequest, runboxv1.PutArchiveResponse] {
		return u.files.PutArchive
	})
}

func (p *filesProxy) GetArchive(ctx context.Context, req *connect.Request[runboxv1.GetArchiveRequest], out *connect.ServerStream[runboxv1.GetArchiveResponse]) error {
	return forwardServerStream(p.s, ctx, req, out, func(u *upstream) func(context.Context, *connect.Request[runboxv1.GetArchiveRequest]) (*connect.ServerStreamForClient[runboxv1.GetArchiveResponse], error) {
		return u.files.GetArchive
	})
}

func (p *filesProxy) Manifest(ctx context.Context, req *connect.Request[runboxv1.ManifestRequest], out *connect.ServerStream[runboxv1.ManifestResponse]) error {
	return forwardServerStream(p.s, ctx, req, out, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ManifestRequest]) (*connect.ServerStreamForClient[runboxv1.ManifestResponse], error) {
		return u.files.Manifest
	})
}
