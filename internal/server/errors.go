package server

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemon/wire"
)

const (
	errorKey           = wire.ErrorKey
	tagUnauthenticated = wire.TagUnauthenticated
)

// apiError converts err to the connect error a handler returns: a runbox
// sentinel's code and Runbox-Error tag (wire.ToConnectError), which the Go
// client maps back to the sentinel.
func apiError(err error) error { return wire.ToConnectError(err) }

// notFound is the answer for a sandbox the caller's tenant does not have:
// the same for another tenant's sandbox as for one that never existed.
func notFound(key string) error {
	return apiError(fmt.Errorf("sandbox %q: %w", key, runbox.ErrSandboxNotFound))
}

// invalid is InvalidArgument naming the field at fault.
func invalid(field, format string, args ...any) error {
	return apiError(fmt.Errorf("%w: %s: %s", runbox.ErrInvalidSpec, field, fmt.Sprintf(format, args...)))
}

// quota is ResourceExhausted naming the limit.
func quota(tenant, limit string, have, max int) error {
	return apiError(fmt.Errorf("%w: tenant %s has %d, its limit %s is %d", runbox.ErrQuotaExceeded, tenant, have, limit, max))
}

// relay turns an error runboxd (or the way to it) returned into the
// answer for the caller: runboxd's own answers keep their code, message
// and tag; a broken connection is Unavailable without a tag, which the Go
// client retries (re-attaching) like a dropped connection to runboxd.
func relay(err error) error {
	if err == nil {
		return nil
	}
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	if tag := ce.Meta().Get(errorKey); tag != "" {
		out.Meta().Set(errorKey, tag)
	}
	if !connect.IsWireError(err) {
		// The server's own client failed: the connection, not runboxd.
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("connection to the sandbox: %s", ce.Message()))
	}
	return out
}

// answered reports whether err is an answer from runboxd (it reached the
// daemon), as opposed to a failure of the connection to it.
func answered(err error) bool {
	if _, _, tagged := wire.FromConnectError(err); tagged {
		return true
	}
	return connect.IsWireError(err) && connect.CodeOf(err) != connect.CodeUnavailable
}
