package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/registry"
)

// errShuttingDown ends streaming calls when the server stops; the Go
// client re-attaches to the next server.
var errShuttingDown = connect.NewError(connect.CodeUnavailable, errors.New("runbox serve is shutting down: re-attach to the exec"))

// execProxy implements runboxv1connect.RunboxServiceHandler by forwarding
// to the sandbox's runboxd, recording each exec in the audit log.
type execProxy struct{ s *Server }

func newExecID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "ex-" + hex.EncodeToString(b)
}

func (p *execProxy) Run(ctx context.Context, req *connect.Request[runboxv1.RunRequest], out *connect.ServerStream[runboxv1.ExecEvent]) error {
	if err := p.s.checkExecSpec("spec", req.Msg.GetSpec()); err != nil {
		return err
	}
	r, err := p.s.route(ctx, req.Header().Get(SandboxHeader))
	if err != nil {
		return err
	}
	defer r.release()
	// The header goes with the first event (or the error): by then runExec
	// may have recreated a sandbox it found lost on the first attempt.
	marked := false
	mark := func() {
		if !marked {
			marked = true
			markRecreated(r, out.ResponseHeader())
		}
	}
	_, err = p.s.runExec(ctx, r, req.Msg, func(ev *runboxv1.ExecEvent) error {
		mark()
		return out.Send(ev)
	}, true)
	mark()
	return err
}

// runExec runs (or re-joins) an exec through r, passing each event to send,
// and returns its result once seen. The exec's audit row is completed with
// the result, or by a watcher if the call ends first. With cutAtShutdown
// (streams) the call ends when the server shuts down; without (unary Run)
// it is let finish. A sandbox found lost before the exec started is
// recreated (when its spec says so) and the exec run in the new one.
func (s *Server) runExec(ctx context.Context, r *routed, msg *runboxv1.RunRequest, send func(*runboxv1.ExecEvent) error, cutAtShutdown bool) (*runboxv1.Result, error) {
	msg = proto.Clone(msg).(*runboxv1.RunRequest)
	if msg.Spec.Id == "" {
		msg.Spec.Id = newExecID()
	}
	key := execKey{r.rec.ID, msg.Spec.Id}
	if cutAtShutdown {
		var cancel context.CancelFunc
		ctx, cancel = s.streamContext(ctx)
		defer cancel()
	}
	sawExit := false
	defer func() {
		if !sawExit {
			s.leaveExec(key)
		}
	}()
	for attempt := 0; ; attempt++ {
		t, newRow, err := s.beginExec(ctx, r, msg.Spec)
		if err != nil {
			return nil, err
		}
		up, err := r.up.rpc.Run(ctx, connect.NewRequest(msg))
		events := 0
		if err == nil {
			for up.Receive() {
				events++
				ev := up.Msg()
				switch e := ev.GetEvent().(type) {
				case *runboxv1.ExecEvent_Started:
					if e.Started.GetAttached() && newRow {
						s.notNew(key, t)
					}
				case *runboxv1.ExecEvent_Exited:
					sawExit = true
					s.finishExec(key, e.Exited.GetResult())
					up.Close()
					if err := send(ev); err != nil {
						return nil, err
					}
					return e.Exited.GetResult(), nil
				}
				if err := send(ev); err != nil {
					up.Close()
					return nil, err
				}
			}
			err = up.Err()
			up.Close()
			if err == nil {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("runboxd ended the stream before the exec's exit event"))
			}
		}
		if events == 0 && attempt == 0 && s.recoverLost(ctx, r, err) {
			continue // the sandbox was lost and is recreated: run it there
		}
		return nil, s.execFailed(ctx, r, key, newRow && events == 0, err)
	}
}

// recoverLost is called when a call's connection to r's runboxd failed
// before anything came back. If the sandbox turns out lost and its spec
// asks for it, the sandbox is recreated, r now routes to the new one, and
// recoverLost returns true: the call may be made again.
func (s *Server) recoverLost(ctx context.Context, r *routed, err error) bool {
	if answered(err) || ctx.Err() != nil || s.streams.Err() != nil {
		return false
	}
	if s.checkLost(r.rec) == nil {
		return false
	}
	rec, gerr := s.store.GetSandbox(ctx, r.rec.Tenant, r.rec.ID)
	if gerr != nil {
		return false
	}
	r.rec = rec
	return s.recreateOrFail(ctx, r) == nil
}

// execFailed answers a Run that failed. A refusal by runboxd (bad spec,
// spawn failure, cancelled id) closes the exec's row if this call opened
// it: the command never ran.
func (s *Server) execFailed(ctx context.Context, r *routed, key execKey, newRow bool, err error) error {
	if answered(err) && newRow {
		s.failExec(key, registry.OutcomeRefused, connect.NewError(connect.CodeOf(err), errors.New(errMessage(err))).Error())
	}
	return s.upstreamError(ctx, r, err)
}

func errMessage(err error) string {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce.Message()
	}
	return err.Error()
}

func (p *execProxy) Attach(ctx context.Context, req *connect.Request[runboxv1.AttachRequest], out *connect.ServerStream[runboxv1.ExecEvent]) error {
	s := p.s
	r, err := s.route(ctx, req.Header().Get(SandboxHeader))
	if err != nil {
		return err
	}
	defer r.release()
	markRecreated(r, out.ResponseHeader())
	key := execKey{r.rec.ID, req.Msg.GetId()}
	following := s.joinExec(key)
	sawExit := false
	defer func() {
		if following && !sawExit {
			s.leaveExec(key)
		}
	}()
	ctx, cancel := s.streamContext(ctx)
	defer cancel()
	up, err := r.up.rpc.Attach(ctx, connect.NewRequest(req.Msg))
	if err != nil {
		return s.upstreamError(ctx, r, err)
	}
	defer up.Close()
	for up.Receive() {
		ev := up.Msg()
		if ex := ev.GetExited(); ex != nil {
			sawExit = true
			s.finishExec(key, ex.GetResult())
		}
		if err := out.Send(ev); err != nil {
			return err
		}
	}
	if err := up.Err(); err != nil {
		return s.upstreamError(ctx, r, err)
	}
	return nil
}

func (p *execProxy) Cancel(ctx context.Context, req *connect.Request[runboxv1.CancelRequest]) (*connect.Response[runboxv1.CancelResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.CancelRequest]) (*connect.Response[runboxv1.CancelResponse], error) {
		return u.rpc.Cancel
	})
}

func (p *execProxy) Signal(ctx context.Context, req *connect.Request[runboxv1.SignalRequest]) (*connect.Response[runboxv1.SignalResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.SignalRequest]) (*connect.Response[runboxv1.SignalResponse], error) {
		return u.rpc.Signal
	})
}

func (p *execProxy) WriteStdin(ctx context.Context, req *connect.Request[runboxv1.WriteStdinRequest]) (*connect.Response[runboxv1.WriteStdinResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.WriteStdinRequest]) (*connect.Response[runboxv1.WriteStdinResponse], error) {
		return u.rpc.WriteStdin
	})
}

func (p *execProxy) CloseStdin(ctx context.Context, req *connect.Request[runboxv1.CloseStdinRequest]) (*connect.Response[runboxv1.CloseStdinResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.CloseStdinRequest]) (*connect.Response[runboxv1.CloseStdinResponse], error) {
		return u.rpc.CloseStdin
	})
}

func (p *execProxy) Resize(ctx context.Context, req *connect.Request[runboxv1.ResizeRequest]) (*connect.Response[runboxv1.ResizeResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ResizeRequest]) (*connect.Response[runboxv1.ResizeResponse], error) {
		return u.rpc.Resize
	})
}

func (p *execProxy) List(ctx context.Context, req *connect.Request[runboxv1.ListRequest]) (*connect.Response[runboxv1.ListResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ListRequest]) (*connect.Response[runboxv1.ListResponse], error) {
		return u.rpc.List
	})
}

func (p *execProxy) Info(ctx context.Context, req *connect.Request[runboxv1.InfoRequest]) (*connect.Response[runboxv1.InfoResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.InfoRequest]) (*connect.Response[runboxv1.InfoResponse], error) {
		return u.rpc.Info
	})
}

func (p *execProxy) ListSessions(ctx context.Context, req *connect.Request[runboxv1.ListSessionsRequest]) (*connect.Response[runboxv1.ListSessionsResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ListSessionsRequest]) (*connect.Response[runboxv1.ListSessionsResponse], error) {
		return u.rpc.ListSessions
	})
}

func (p *execProxy) DeleteSession(ctx context.Context, req *connect.Request[runboxv1.DeleteSessionRequest]) (*connect.Response[runboxv1.DeleteSessionResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.DeleteSessionRequest]) (*connect.Response[runboxv1.DeleteSessionResponse], error) {
		return u.rpc.DeleteSession
	})
}

// Pause pauses the sandbox the request is routed to as PauseSandbox does
// (docker: the engine's pause), not only its runboxd.
func (p *execProxy) Pause(ctx context.Context, req *connect.Request[runboxv1.PauseRequest]) (*connect.Response[runboxv1.PauseResponse], error) {
	if _, err := p.s.setPaused(ctx, tenantOf(ctx), req.Header().Get(SandboxHeader), true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.PauseResponse{}), nil
}

// Resume resumes the sandbox the request is routed to as ResumeSandbox
// does.
func (p *execProxy) Resume(ctx context.Context, req *connect.Request[runboxv1.ResumeRequest]) (*connect.Response[runboxv1.ResumeResponse], error) {
	if _, err := p.s.setPaused(ctx, tenantOf(ctx), req.Header().Get(SandboxHeader), false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&runboxv1.ResumeResponse{}), nil
}

// Hold is forwarded to the sandbox's runboxd: its hold lasts as long as
// this stream, so a caller that goes away releases it (its stream's end
// ends the upstream one).
func (p *execProxy) Hold(ctx context.Context, req *connect.Request[runboxv1.HoldRequest], out *connect.ServerStream[runboxv1.HoldEvent]) error {
	return forwardServerStream(p.s, ctx, req, out, func(u *upstream) func(context.Context, *connect.Request[runboxv1.HoldRequest]) (*connect.ServerStreamForClient[runboxv1.HoldEvent], error) {
		return u.rpc.Hold
	})
}

// ReleaseHold is forwarded to the sandbox's runboxd, which knows the hold.
func (p *execProxy) ReleaseHold(ctx context.Context, req *connect.Request[runboxv1.ReleaseHoldRequest]) (*connect.Response[runboxv1.ReleaseHoldResponse], error) {
	return forwardUnary(p.s, ctx, req, func(u *upstream) func(context.Context, *connect.Request[runboxv1.ReleaseHoldRequest]) (*connect.Response[runboxv1.ReleaseHoldResponse], error) {
		return u.rpc.ReleaseHold
	})
}

// Shutdown is not forwarded: ending a sandbox's runboxd behind the
// registry's back would leave it lost. SandboxService.Delete removes a
// sandbox.
func (p *execProxy) Shutdown(ctx context.Context, req *connect.Request[runboxv1.ShutdownRequest]) (*connect.Response[runboxv1.ShutdownResponse], error) {
	r, err := p.s.route(ctx, req.Header().Get(SandboxHeader))
	if err != nil {
		return nil, err
	}
	r.release()
	return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%w: through runbox serve, remove a sandbox with SandboxService.Delete", runbox.ErrInvalidSpec))
}
