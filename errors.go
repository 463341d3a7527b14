package runbox

import (
	"errors"
	"fmt"
)

// Sentinel errors. Compare with errors.Is; every error runbox returns for
// these conditions wraps one of them.
var (
	// ErrSandboxLost means runboxd cannot be reached or the sandbox is gone.
	// It is never reported as an exit code.
	ErrSandboxLost = errors.New("sandbox lost")
	// ErrUnauthenticated means runboxd refused the connection because it
	// did not carry the sandbox's secret (a missing, wrong or damaged
	// secret): the sandbox is there, but this caller may not use it.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrSandboxNotFound means no sandbox has the given id or name.
	ErrSandboxNotFound = errors.New("no such sandbox")
	// ErrExecNotFound means the daemon knows no exec with the given id
	// (never started, or forgotten: past its retention window, or the
	// oldest of its exited execs beyond the daemon's budget of retained
	// results).
	ErrExecNotFound = errors.New("no such exec")
	// ErrCancelled means the exec was cancelled before it started, so it
	// never ran.
	ErrCancelled = errors.New("exec cancelled")
	// ErrInvalidSpec means a request was malformed (no command, both
	// command and argv, a negative timeout, a sandbox workdir inside the
	// runbox home...).
	ErrInvalidSpec = errors.New("invalid spec")
	// ErrNotRunning means the exec has already exited, so it cannot take
	// stdin or a signal.
	ErrNotRunning = errors.New("exec not running")
	// ErrSessionNotFound means no shell session has the given name.
	ErrSessionNotFound = errors.New("no such session")
	// ErrProviderUnavailable means a provider cannot work on this machine
	// as it is now: its engine is not reachable, or the kernel lacks what
	// it needs. The message says what to start or use instead.
	ErrProviderUnavailable = errors.New("provider unavailable")
	// ErrOutputLost means streamed output has a gap (see OutputGap); the
	// exec itself is unaffected.
	ErrOutputLost = errors.New("streamed output lost")
	// ErrSpawn means the command could not be started (missing binary,
	// bad working directory).
	ErrSpawn = errors.New("cannot start command")
	// ErrCommandNotFound is the ErrSpawn of an argv whose program does not
	// exist (runbox exits 127 for it, as a shell does).
	ErrCommandNotFound error = &spawnError{"cannot start command: command not found"}
	// ErrCommandNotExecutable is the ErrSpawn of an argv whose program
	// exists but cannot be executed (runbox exits 126, as a shell does).
	ErrCommandNotExecutable error = &spawnError{"cannot start command: not executable"}
	// ErrFileNotFound means a path in the sandbox (or, for a pull, on this
	// machine) does not exist.
	ErrFileNotFound = errors.New("file not found")
	// ErrPermission means the file system refused access to a path.
	ErrPermission = errors.New("permission denied")
	// ErrIsDirectory means a file operation met a directory.
	ErrIsDirectory = errors.New("is a directory")
	// ErrNotDirectory means a path used as a directory is not one.
	ErrNotDirectory = errors.New("not a directory")
	// ErrEscapesRoot means a path, an archive entry or a link would reach
	// outside the root it must stay beneath (through "..", an absolute
	// path, or a symlink). Nothing was written outside the root.
	ErrEscapesRoot = errors.New("path escapes root")
	// ErrInvalidPath means a path or archive entry name cannot be used: it
	// is empty, has a NUL byte or an over-long component, or names an
	// entry type runbox does not write (devices, fifos).
	ErrInvalidPath = errors.New("invalid path")
	// ErrTooLarge means a request, or a part of it, is over its size limit
	// (see MaxCommandBytes and the limits beside it). The error is a
	// *SizeError naming the limit when the client caught it; the daemon's
	// carries the same message. Nothing was run.
	ErrTooLarge = errors.New("request too large")
	// ErrExecIDConflict means an exec with the given id exists and was
	// started with a different spec. An exec id is an idempotency key: the
	// same id with the same spec attaches to the exec instead of running it
	// again, and the same id with another spec is refused.
	ErrExecIDConflict = errors.New("exec id already in use by a different spec")
	// ErrUnsafeWorkdir means a sandbox's workdir is a directory someone
	// other than the caller can put things into, now or later: it is not
	// owned by the caller, or others may write into it (sticky like /tmp,
	// world- or group-writable, or through a POSIX ACL). Whatever they left
	// there (a daemon's unix socket above all) would be in the sandbox. The
	// message names the directory and what to do. It is an ErrInvalidSpec
	// (errors.Is holds for both), and travels on the wire under that tag.
	ErrUnsafeWorkdir error = &invalidSpecError{"workdir is not the caller's own"}
	// ErrNameInUse means another sandbox already has the requested name
	// (names are unique per runbox home, across providers, and per tenant
	// of runbox serve). runbox serve answers it as already_exists.
	ErrNameInUse = errors.New("sandbox name already in use")
	// ErrQuotaExceeded means a tenant of runbox serve has used up one of
	// its quotas (sandboxes, concurrent execs); the message names the limit.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrSandboxPaused means the sandbox is paused (runbox pause): it
	// takes no new exec until it is resumed. Nothing is lost; running
	// execs continue with their time left once it is.
	ErrSandboxPaused = errors.New("sandbox is paused")
	// ErrUnsupported means the provider cannot do what was asked (a
	// snapshot of a provider without one); the message names the
	// provider. errors.Is also matches errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("%w by this provider", errors.ErrUnsupported)
)

// Error is an error from an operation on a sandbox, carrying which operation,
// sandbox and exec it concerns. Err is usually one of the sentinels above.
type Error struct {
	Op      string // "exec", "attach", "cancel", "create", ...
	Sandbox string // sandbox id or name, if known
	Exec    string // exec id, if any
	Err     error
}

// Error formats as "op sandbox exec: cause".
func (e *Error) Error() string {
	s := e.Op
	if e.Sandbox != "" {
		s += " sandbox " + e.Sandbox
	}
	if e.Exec != "" {
		s += " exec " + e.Exec
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// spawnError is an ErrSpawn that says more: errors.Is finds ErrSpawn in it.
type spawnError struct{ msg string }

// Error is the message, which starts with ErrSpawn's.
func (e *spawnError) Error() string { return e.msg }

// Unwrap is ErrSpawn.
func (e *spawnError) Unwrap() error { return ErrSpawn }

// invalidSpecError is a finer ErrInvalidSpec (ErrUnsafeWorkdir).
type invalidSpecError struct{ msg string }

// Error is the message.
func (e *invalidSpecError) Error() string { return e.msg }

// Unwrap is ErrInvalidSpec.
func (e *invalidSpecError) Unwrap() error { return ErrInvalidSpec }
