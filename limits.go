package runbox

import (
	"fmt"
	"strings"
)

// Request size limits. The client checks them before sending and runboxd
// again on receipt, with the same *SizeError message, so an oversize request
// is refused before it can cost the daemon memory; runboxd also refuses any
// single API message larger than MaxMessageBytes before reading it.
//
// The kernel has limits of its own that these do not lift: one argument
// (the shell string included, as `bash -c` gets it as one) is at most
// 128 KiB on Linux, and arguments plus environment together at most a
// quarter of the stack limit (2 MiB by default). A request within the
// limits below but beyond the kernel's fails with runbox.ErrSpawn
// ("argument list too long").
const (
	// MaxCommandBytes bounds ExecSpec.Command.
	MaxCommandBytes = 1 << 20
	// MaxArgvBytes bounds ExecSpec.Argv, all arguments together.
	MaxArgvBytes = 1 << 20
	// MaxEnvBytes bounds ExecSpec.Env, every NAME=VALUE together.
	MaxEnvBytes = 1 << 20
	// MaxCwdBytes bounds ExecSpec.Cwd (Linux's PATH_MAX).
	MaxCwdBytes = 4096
	// MaxStdinBytes bounds ExecSpec.Stdin, the stdin given with the
	// request. Stream larger input with StdinStream and WriteStdin.
	MaxStdinBytes = 4 << 20
	// MaxStdinChunkBytes bounds one WriteStdin call's data.
	MaxStdinChunkBytes = 1 << 20
	// MaxFileChunkBytes bounds the data of one message of a file or archive
	// upload (the client sends 256 KiB messages).
	MaxFileChunkBytes = 1 << 20
	// MaxMessageBytes bounds any one API message runboxd reads: room for a
	// spec at every limit above, plus headroom for its other fields.
	MaxMessageBytes = MaxCommandBytes + MaxArgvBytes + MaxEnvBytes + MaxCwdBytes + MaxStdinBytes + 64<<10
)

// SizeError is the error for a request part over its limit. It unwraps to
// ErrTooLarge.
type SizeError struct {
	// What is too large: "command", "argv", "env", "stdin", ...
	What string
	// Size is its size in bytes; Limit the largest allowed.
	Size, Limit int64
	// Const names the limit's constant, e.g. "runbox.MaxCommandBytes".
	Const string
}

// Error formats as "command is 104857600 bytes, more than the 1 MiB limit
// (runbox.MaxCommandBytes)".
func (e *SizeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, more than the %s limit (%s)", e.What, e.Size, formatBytes(e.Limit), e.Const)
}

// Unwrap returns ErrTooLarge.
func (e *SizeError) Unwrap() error { return ErrTooLarge }

// formatBytes writes whole KiB and MiB as such.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}

// CheckSize returns a *SizeError when size is over limit.
func CheckSize(what string, size, limit int64, constName string) error {
	if size > limit {
		return &SizeError{What: what, Size: size, Limit: limit, Const: constName}
	}
	return nil
}

// CheckInput checks what spec carries to the command: sizes within the
// limits above (a *SizeError, ErrTooLarge) and no NUL byte in the command,
// an argument, an environment variable or the working directory, and no
// empty or '='-holding variable name, and durations in range
// (CheckDurations) (ErrInvalidSpec). Any other byte is
// allowed, invalid UTF-8 included. The client checks a spec with it before
// sending, runboxd on receipt.
func (s ExecSpec) CheckInput() error {
	if err := CheckSize("command", int64(len(s.Command)), MaxCommandBytes, "runbox.MaxCommandBytes"); err != nil {
		return err
	}
	if strings.IndexByte(s.Command, 0) >= 0 {
		return fmt.Errorf("%w: the command has a NUL byte", ErrInvalidSpec)
	}
	var argv int64
	for i, a := range s.Argv {
		argv += int64(len(a))
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("%w: argument %d has a NUL byte", ErrInvalidSpec, i)
		}
	}
	if err := CheckSize("argv", argv, MaxArgvBytes, "runbox.MaxArgvBytes"); err != nil {
		return err
	}
	var env int64
	for k, v := range s.Env {
		env += int64(len(k) + 1 + len(v))
		switch {
		case k == "":
			return fmt.Errorf("%w: an environment variable has an empty name", ErrInvalidSpec)
		case strings.ContainsAny(k, "=\x00"):
			return fmt.Errorf("%w: environment variable name %q has '=' or a NUL byte", ErrInvalidSpec, k)
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("%w: environment variable %q has a NUL byte in its value", ErrInvalidSpec, k)
		}
	}
	if err := CheckSize("env", env, MaxEnvBytes, "runbox.MaxEnvBytes"); err != nil {
		return err
	}
	if err := CheckSize("cwd", int64(len(s.Cwd)), MaxCwdBytes, "runbox.MaxCwdBytes"); err != nil {
		return err
	}
	if strings.IndexByte(s.Cwd, 0) >= 0 {
		return fmt.Errorf("%w: the working directory has a NUL byte", ErrInvalidSpec)
	}
	if err := CheckSize("stdin", int64(len(s.Stdin)), MaxStdinBytes, "runbox.MaxStdinBytes"); err != nil {
		return err
	}
	return s.CheckDurations()
}
