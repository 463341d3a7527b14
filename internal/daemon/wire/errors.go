package wire

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
)

// ErrorKey is the response-metadata key that names which runbox error a
// failed call carries. Its values are stable across versions; connect codes
// alone are too coarse (several sentinels share FailedPrecondition).
const ErrorKey = "Runbox-Error"

// Values of ErrorKey.
const (
	TagCancelled    = "cancelled"
	TagExecNotFound = "exec-not-found"
	TagInvalidSpec  = "invalid-spec"
	TagSpawn        = "spawn"
	TagNotRunning   = "not-running"
	// TagSessionNotFound extends the contract's list for
	// runbox.ErrSessionNotFound, added with shell sessions.
	TagSessionNotFound = "session-not-found"
	// Tags of the files API's sentinels.
	TagFileNotFound = "file-not-found"
	TagPermission   = "permission"
	TagIsDirectory  = "is-directory"
	TagNotDirectory = "not-directory"
	TagEscapesRoot  = "escapes-root"
	TagInvalidPath  = "invalid-path"
	// TagTooLarge is runbox.ErrTooLarge: a request over a size limit.
	TagTooLarge = "too-large"
	// TagExecIDConflict is runbox.ErrExecIDConflict: an exec id reused with
	// a different spec.
	TagExecIDConflict = "exec-id-conflict"
	// Tags the control plane (runbox serve) sends; runboxd never does.
	// TagSandboxNotFound is runbox.ErrSandboxNotFound: no sandbox of the
	// caller's tenant has that id or name.
	TagSandboxNotFound = "sandbox-not-found"
	// TagSandboxLost is runbox.ErrSandboxLost: the sandbox's runboxd is gone.
	TagSandboxLost = "sandbox-lost"
	// TagUnauthenticated is runbox.ErrUnauthenticated: no valid bearer token.
	TagUnauthenticated = "unauthenticated"
	// TagQuotaExceeded is runbox.ErrQuotaExceeded: a tenant's quota is used up.
	TagQuotaExceeded = "quota-exceeded"
	// TagSandboxPaused is runbox.ErrSandboxPaused: the sandbox takes no
	// new exec until it is resumed.
	TagSandboxPaused = "sandbox-paused"
	// TagUnsupported is runbox.ErrUnsupported: the provider cannot do it.
	TagUnsupported = "unsupported"
	// TagNameInUse is runbox.ErrNameInUse: another sandbox has that name.
	TagNameInUse = "name-in-use"
	// TagInternal marks a failure of the daemon that is none of the above.
	// It tells the client the daemon answered (so this is not a transport
	// failure to retry) without naming a sentinel.
	TagInternal = "internal"
)

// sentinels maps each sentinel the daemon may return to its tag and code.
var sentinels = []struct {
	err  error
	tag  string
	code connect.Code
}{
	{runbox.ErrCancelled, TagCancelled, connect.CodeFailedPrecondition},
	{runbox.ErrExecNotFound, TagExecNotFound, connect.CodeNotFound},
	{runbox.ErrInvalidSpec, TagInvalidSpec, connect.CodeInvalidArgument},
	{runbox.ErrSpawn, TagSpawn, connect.CodeFailedPrecondition},
	{runbox.ErrNotRunning, TagNotRunning, connect.CodeFailedPrecondition},
	{runbox.ErrSessionNotFound, TagSessionNotFound, connect.CodeNotFound},
	{runbox.ErrFileNotFound, TagFileNotFound, connect.CodeNotFound},
	{runbox.ErrPermission, TagPermission, connect.CodePermissionDenied},
	{runbox.ErrIsDirectory, TagIsDirectory, connect.CodeFailedPrecondition},
	{runbox.ErrNotDirectory, TagNotDirectory, connect.CodeFailedPrecondition},
	{runbox.ErrEscapesRoot, TagEscapesRoot, connect.CodePermissionDenied},
	{runbox.ErrInvalidPath, TagInvalidPath, connect.CodeInvalidArgument},
	{runbox.ErrTooLarge, TagTooLarge, connect.CodeResourceExhausted},
	{runbox.ErrExecIDConflict, TagExecIDConflict, connect.CodeAlreadyExists},
	{runbox.ErrSandboxNotFound, TagSandboxNotFound, connect.CodeNotFound},
	{runbox.ErrSandboxLost, TagSandboxLost, connect.CodeUnavailable},
	{runbox.ErrUnauthenticated, TagUnauthenticated, connect.CodeUnauthenticated},
	{runbox.ErrQuotaExceeded, TagQuotaExceeded, connect.CodeResourceExhausted},
	{runbox.ErrSandboxPaused, TagSandboxPaused, connect.CodeFailedPrecondition},
	{runbox.ErrUnsupported, TagUnsupported, connect.CodeUnimplemented},
	{runbox.ErrNameInUse, TagNameInUse, connect.CodeAlreadyExists},
}

// ToConnectError converts an error from the supervisor into the connect error
// a handler returns: the sentinel's code plus ErrorKey metadata. Context
// errors keep connect's own codes and no tag; a *connect.Error passes through.
func ToConnectError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*connect.Error](err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			ce := connect.NewError(s.code, err)
			ce.Meta().Set(ErrorKey, s.tag)
			return ce
		}
	}
	ce := connect.NewError(connect.CodeInternal, err)
	ce.Meta().Set(ErrorKey, TagInternal)
	return ce
}

// Refinements are the finer sentinels of a tagged one: each wraps it
// (errors.Is holds for both) and travels under its tag, which every client
// (the SDKs too) knows; the message, which holds the finer one's text
// followed by ": ", tells them apart.
var Refinements = map[error][]error{
	runbox.ErrSpawn:       {runbox.ErrCommandNotFound, runbox.ErrCommandNotExecutable},
	runbox.ErrInvalidSpec: {runbox.ErrUnsafeWorkdir},
}

// refine returns the finer sentinel (Refinements) the daemon's message msg
// names for sentinel, else sentinel.
func refine(sentinel error, msg string) error {
	for _, fine := range Refinements[sentinel] {
		if strings.Contains(msg, fine.Error()+": ") {
			return fine
		}
	}
	return sentinel
}

// FromConnectError reads the ErrorKey tag of an error a call returned.
// tagged reports whether the daemon sent one (so it answered: the error is
// not a transport failure); sentinel is the matching runbox sentinel, or nil
// for TagInternal and tags this version does not know; msg is the daemon's
// message.
func FromConnectError(err error) (sentinel error, msg string, tagged bool) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return nil, "", false
	}
	tag := ce.Meta().Get(ErrorKey)
	if tag == "" {
		return nil, "", false
	}
	for _, s := range sentinels {
		if s.tag == tag {
			return refine(s.err, ce.Message()), ce.Message(), true
		}
	}
	return nil, ce.Message(), true
}
