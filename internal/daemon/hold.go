package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// Hold freezes every exec's processes, as Pause does, for as long as the
// stream lasts: it answers one HoldEvent once they are frozen, then keeps
// the hold until the client ends the stream, its connection drops (a
// holder that dies releases it with its socket) or the daemon stops. The
// user's pause is the supervisor's separate flag, so a Resume meanwhile
// leaves the commands frozen until the last hold ends.
func (s *Server) Hold(ctx context.Context, req *connect.Request[runboxv1.HoldRequest], out *connect.ServerStream[runboxv1.HoldEvent]) error {
	release, err := s.sup.Hold()
	if err != nil {
		return s.rpcError("hold", err)
	}
	defer func() {
		if err := release(); err != nil {
			s.log.Error("release hold", "reason", req.Msg.GetReason(), "err", err)
		}
	}()
	if err := out.Send(&runboxv1.HoldEvent{Frozen: true, Paused: s.sup.Paused()}); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.stopping:
	}
	return nil
}
