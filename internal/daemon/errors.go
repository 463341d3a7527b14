package daemon

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemon/wire"
)

// rpcError converts a supervisor error into the error a handler returns:
// the sentinel's connect code plus the Runbox-Error metadata the client maps
// back (see wire.ToConnectError). ErrSandboxLost (the daemon is shutting
// down) becomes Unavailable without a tag, so the client treats it as the
// transport failure it is. Errors that match no sentinel are logged.
func (s *Server) rpcError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, runbox.ErrSandboxLost) {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	ce := wire.ToConnectError(err)
	if _, _, tagged := wire.FromConnectError(ce); tagged && connect.CodeOf(ce) == connect.CodeInternal {
		s.log.Error(op, "err", err)
	}
	return ce
}
