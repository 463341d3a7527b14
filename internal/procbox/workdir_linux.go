package procbox

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// resolveWorkdir opens the absolute path abs component by component with
// no symbolic link followed (openat2 RESOLVE_NO_SYMLINKS) and returns the
// directory's identity, so that a workdir is the directory the caller
// named and not where a link (one a sandbox planted, say) points. A link
// anywhere in the path, a missing directory (runbox does not create one on
// the host) and a non-directory are refused with runbox.ErrInvalidSpec.
func resolveWorkdir(abs string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return st, fmt.Errorf("workdir %s has a symbolic link in its path: runbox resolves a workdir without following links (rule 2 of docs/security.md); give the real path: %w", abs, runbox.ErrInvalidSpec)
	case errors.Is(err, unix.ENOENT):
		return st, fmt.Errorf("workdir %s does not exist: runbox does not create it on the host; make it first: %w", abs, runbox.ErrInvalidSpec)
	case errors.Is(err, unix.ENOTDIR):
		return st, fmt.Errorf("workdir %s is not a directory: %w", abs, runbox.ErrInvalidSpec)
	case err != nil:
		return st, fmt.Errorf("workdir %s: %w", abs, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("workdir %s: %w", abs, err)
	}
	return st, nil
}

// physicalWd is the working directory as the kernel has it, with no
// symbolic link in it (os.Getwd trusts $PWD, which may have some).
func physicalWd() (string, error) { return unix.Getwd() }
