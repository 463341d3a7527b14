package daemon

import (
	"context"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// Resize changes the terminal size of an exec started with a pty.
func (s *Server) Resize(_ context.Context, req *connect.Request[runboxv1.ResizeRequest]) (*connect.Response[runboxv1.ResizeResponse], error) {
	m := req.Msg
	if err := s.sup.Resize(m.GetId(), wire.ClampSize(m.GetRows()), wire.ClampSize(m.GetCols())); err != nil {
		return nil, s.rpcError("resize", err)
	}
	return connect.NewResponse(&runboxv1.ResizeResponse{}), nil
}
