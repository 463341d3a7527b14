package frontrpc

import (
	"strings"

	"github.com/runbox/runbox"
)

// tags maps each Runbox-Error tag runboxd sends to its runbox sentinel,
// as package wire's table does (wire.ErrorKey; a test compares the two).
var tags = map[string]error{
	"cancelled":         runbox.ErrCancelled,
	"exec-not-found":    runbox.ErrExecNotFound,
	"invalid-spec":      runbox.ErrInvalidSpec,
	"spawn":             runbox.ErrSpawn,
	"not-running":       runbox.ErrNotRunning,
	"session-not-found": runbox.ErrSessionNotFound,
	"file-not-found":    runbox.ErrFileNotFound,
	"permission":        runbox.ErrPermission,
	"is-directory":      runbox.ErrIsDirectory,
	"not-directory":     runbox.ErrNotDirectory,
	"escapes-root":      runbox.ErrEscapesRoot,
	"invalid-path":      runbox.ErrInvalidPath,
	"too-large":         runbox.ErrTooLarge,
	"exec-id-conflict":  runbox.ErrExecIDConflict,
	"sandbox-not-found": runbox.ErrSandboxNotFound,
	"sandbox-lost":      runbox.ErrSandboxLost,
	"unauthenticated":   runbox.ErrUnauthenticated,
	"quota-exceeded":    runbox.ErrQuotaExceeded,
	"sandbox-paused":    runbox.ErrSandboxPaused,
	"unsupported":       runbox.ErrUnsupported,
	"name-in-use":       runbox.ErrNameInUse,
}

// Sentinel returns the runbox sentinel that the tag names for a daemon's
// error message msg, or nil for "internal" and tags it does not know. A
// spawn failure whose message names a missing or non-executable program is
// runbox.ErrCommandNotFound or runbox.ErrCommandNotExecutable, as the Go
// client refines it.
func Sentinel(tag, msg string) error {
	s := tags[tag]
	if s == runbox.ErrSpawn {
		for _, fine := range []error{runbox.ErrCommandNotFound, runbox.ErrCommandNotExecutable} {
			if strings.Contains(msg, fine.Error()+": ") {
				return fine
			}
		}
	}
	return s
}
