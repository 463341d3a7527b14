package daemon

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// Shutdown stops every exec with the stop protocol (grace_ms 0 means
// runbox.DefaultGrace, for every exec alike), answers, and then asks
// the daemon to exit (ShutdownRequested). The answer therefore means every
// exec has stopped. The process is never ended from inside the handler:
// Serve's graceful HTTP shutdown lets this response be written first.
func (s *Server) Shutdown(ctx context.Context, req *connect.Request[runboxv1.ShutdownRequest]) (*connect.Response[runboxv1.ShutdownResponse], error) {
	if req.Msg.GetGraceMs() < 0 {
		return nil, s.rpcError("shutdown", fmt.Errorf("shutdown: %w: negative grace", runbox.ErrInvalidSpec))
	}
	if err := runbox.CheckMs("grace", req.Msg.GetGraceMs(), runbox.MaxGrace, "runbox.MaxGrace", false); err != nil {
		return nil, s.rpcError("shutdown", err)
	}
	grace := wire.MsToDuration(req.Msg.GetGraceMs())
	if grace == 0 {
		grace = runbox.DefaultGrace
	}
	// The stop protocol runs to its end even if the caller goes away.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownBound+grace)
	defer cancel()
	err := s.sup.Shutdown(stopCtx, grace)
	s.requestShutdown()
	if err != nil {
		return nil, s.rpcError("shutdown", err)
	}
	return connect.NewResponse(&runboxv1.ShutdownResponse{}), nil
}
