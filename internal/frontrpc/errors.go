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
// finer sentinel the message names (refinements: a missing or
// non-executable program, a workdir not the caller's own) is returned
// instead, as the Go client refines it.
func Sentinel(tag, msg string) error {
	s := tags[tag]
	for _, fine := range refinements[s] {
		if strings.Contains(msg, fine.Error()+": ") {
			return fine
		}
	}
	return s
}

// refinements are package wire's Refinements (a test compares the two):
// finer sentinels that travel under a coarser one's tag, told apart by
// their text in the message.
var refinements = map[error][]error{
	runbox.ErrSpawn:       {runbox.ErrCommandNotFound, runbox.ErrCommandNotExecutable},
	runbox.ErrInvalidSpec: {runbox.ErrUnsafeWorkdir},
}
