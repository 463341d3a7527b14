package procbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

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

// checkPrivate refuses a workdir, st being the stat of the directory
// resolveWorkdir opened (so no rename in between changes what is checked),
// that users other than the caller can write into: sticky (1777 like /tmp,
// /var/tmp, /dev/shm), writable by others, or writable by a group other
// than the caller's primary group (a user private group's 0775 directory
// is the caller's own). Whatever such users and services leave there (a
// dockerd's -H unix:///tmp/d.sock, any daemon's pathname socket) would be
// in the sandbox, where it could connect to it.
func checkPrivate(abs string, st unix.Stat_t) error {
	mode := st.Mode & 0o7777
	var why string
	switch {
	case mode&unix.S_ISVTX != 0:
		why = "it is sticky"
	case mode&0o002 != 0:
		why = "any user may write into it"
	case mode&0o020 != 0 && st.Gid != uint32(os.Getegid()):
		why = fmt.Sprintf("group %d, not yours, may write into it", st.Gid)
	default:
		return nil
	}
	return fmt.Errorf("workdir %s is shared with other users and services (mode %04o: %s): their sockets and files would be in the sandbox; use a directory of your own, e.g. mkdir %s: %w: %w",
		abs, mode, why, filepath.Join(abs, "work"), ErrSharedWorkdir, runbox.ErrInvalidSpec)
}
