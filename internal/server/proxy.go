package server

import (
	"context"

	"connectrpc.com/connect"
)

// The generic forwarders below proxy one call to the runboxd of the
// sandbox its Runbox-Sandbox header names, message for message.

// upstreamError is the answer for a call runboxd (or the way to it)
// failed: runboxd's own answers as they are; a failed connection is
// ErrSandboxLost when the provider confirms the sandbox is gone, else
// Unavailable (the Go client retries it).
func (s *Server) upstreamError(ctx context.Context, r *routed, err error) error {
	if s.streams.Err() != nil && !answered(err) {
		return errShuttingDown
	}
	if ctx.Err() != nil {
		return connect.NewError(connect.CodeCanceled, context.Cause(ctx))
	}
	if !answered(err) {
		if lost := s.checkLost(r.rec); lost != nil {
			return lost
		}
	}
	return relay(err)
}

// markRecreated tells the caller its sandbox was replaced.
func markRecreated(r *routed, h interface{ Set(string, string) }) {
	if r.recreated {
		h.Set(RecreatedHeader, "true")
	}
}

func forwardUnary[Req, Res any](s *Server, ctx context.Context, req *connect.Request[Req],
	call func(*upstream) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	r, err := s.route(ctx, req.Header().Get(SandboxHeader))
	if err != nil {
		return nil, err
	}
	defer r.release()
	resp, err := call(r.up)(ctx, connect.NewRequest(req.Msg))
	if err != nil && s.recoverLost(ctx, r, err) {
		resp, err = call(r.up)(ctx, connect.NewRequest(req.Msg))
	}
	if err != nil {
		return nil, s.upstreamError(ctx, r, err)
	}
	out := connect.NewResponse(resp.Msg)
	markRecreated(r, out.Header())
	return out, nil
}

func forwardServerStream[Req, Res any](s *Server, ctx context.Context, req *connect.Request[Req], out *connect.ServerStream[Res],
	call func(*upstream) func(context.Context, *connect.Request[Req]) (*connect.ServerStreamForClient[Res], error)) error {
	r, err := s.route(ctx, req.Header().Get(SandboxHeader))
	if err != nil {
		return err
	}
	defer r.release()
	markRecreated(r, out.ResponseHeader())
	ctx, cancel := s.streamContext(ctx)
	defer cancel()
	up, err := call(r.up)(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return s.upstreamError(ctx, r, err)
	}
	defer up.Close()
	for up.Receive() {
		if err := out.Send(up.Msg()); err != nil {
			return err
		}
	}
	if err := up.Err(); err != nil {
		return s.upstreamError(ctx, r, err)
	}
	return nil
}

func forwardClientStream[Req, Res any](s *Server, ctx context.Context, in *connect.ClientStream[Req],
	call func(*upstream) func(context.Context) *connect.ClientStreamForClient[Req, Res]) (*connect.Response[Res], error) {
	r, err := s.route(ctx, in.RequestHeader().Get(SandboxHeader))
	if err != nil {
		return nil, err
	}
	defer r.release()
	ctx, cancel := s.streamContext(ctx)
	defer cancel()
	up := call(r.up)(ctx)
	for in.Receive() {
		if err := up.Send(in.Msg()); err != nil {
			break // CloseAndReceive says why
		}
	}
	if err := in.Err(); err != nil {
		cancel()
		up.CloseAndReceive()
		return nil, err
	}
	resp, err := up.CloseAndReceive()
	if err != nil {
		return nil, s.upstreamError(ctx, r, err)
	}
	out := connect.NewResponse(resp.Msg)
	markRecreated(r, out.Header())
	return out, nil
}

// streamContext derives a streaming call's context, which also ends when
// the server shuts down: streams are cut then (clients re-attach to the
// next server), unary calls are let finish.
func (s *Server) streamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.streams, func() { cancel(errShuttingDown) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}
