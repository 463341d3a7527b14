package files

import (
	"errors"
	"strconv"
	"syscall"

	"github.com/runbox/runbox"
)

// PathError is a failed operation on a path: the runbox sentinel callers
// compare with (nil when none fits) and the system error beneath it.
type PathError struct {
	Op   string
	Path string
	// Kind is a runbox sentinel (runbox.ErrFileNotFound, ErrPermission,
	// ErrIsDirectory, ErrNotDirectory, ErrEscapesRoot, ErrInvalidPath) or
	// nil.
	Kind error
	// Err is the underlying error (usually a syscall.Errno); may be nil
	// when Kind says it all.
	Err error
}

// Error formats as "op path: cause".
func (e *PathError) Error() string {
	s := e.Op + " " + quote(e.Path) + ": "
	switch {
	case e.Kind != nil && e.Err != nil:
		return s + e.Kind.Error() + " (" + e.Err.Error() + ")"
	case e.Kind != nil:
		return s + e.Kind.Error()
	case e.Err != nil:
		return s + e.Err.Error()
	}
	return s + "failed"
}

// Unwrap returns the sentinel and the underlying error.
func (e *PathError) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// quote shows a path in a message: as is when it is plain, quoted when it
// has spaces or bytes a terminal would not show.
func quote(p string) string {
	for _, r := range p {
		if r <= ' ' || r == '"' || r == 0x7f || r == 0xfffd {
			return strconv.Quote(p)
		}
	}
	if p == "" {
		return `""`
	}
	return p
}

// kindOf maps an errno to its runbox sentinel. resolving says the error
// came from resolving a path beneath a root, where EXDEV and ELOOP mean the
// kernel refused to leave it.
func kindOf(err error, resolving bool) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return nil
	}
	switch errno {
	case syscall.ENOENT:
		return runbox.ErrFileNotFound
	case syscall.EACCES, syscall.EPERM:
		return runbox.ErrPermission
	case syscall.EISDIR:
		return runbox.ErrIsDirectory
	case syscall.ENOTDIR:
		return runbox.ErrNotDirectory
	case syscall.ENAMETOOLONG:
		return runbox.ErrInvalidPath
	case syscall.EXDEV:
		if resolving {
			return runbox.ErrEscapesRoot
		}
	}
	return nil
}

// pathErr wraps err from op on p.
func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*PathError); ok {
		return err
	}
	return &PathError{Op: op, Path: p, Kind: kindOf(err, false), Err: err}
}

// resolveErr wraps err from resolving p beneath a root.
func resolveErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*PathError); ok {
		return err
	}
	return &PathError{Op: op, Path: p, Kind: kindOf(err, true), Err: err}
}
