package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// Info describes the daemon, including its goroutine and fd counts.
func (s *Server) Info(context.Context, *connect.Request[runboxv1.InfoRequest]) (*connect.Response[runboxv1.InfoResponse], error) {
	return connect.NewResponse(wire.DaemonInfoToProto(s.sup.Info())), nil
}
