package safepath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenBeneath opens the directory rel beneath the directory root, refusing
// (with an error wrapping ErrUnsafe) a rel that is absolute, has a ".."
// component, or passes through a symlink, including root's own last
// component. root itself must be an absolute path with no symlink in it.
func OpenBeneath(root, rel string) (*os.File, error) {
	if filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%w: %q is absolute, want a path relative to %s", ErrUnsafe, rel, root)
	}
	for _, c := range strings.Split(rel, "/") {
		if c == ".." {
			return nil, fmt.Errorf("%w: %q has a \"..\" component", ErrUnsafe, rel)
		}
	}
	rootF, err := OpenDirNoFollow(root)
	if err != nil {
		return nil, err
	}
	defer rootF.Close()
	if rel == "" || rel == "." {
		return OpenDirNoFollow(root)
	}
	fd, err := unix.Openat2(int(rootF.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		return walk(rootF, root, rel)
	}
	if err != nil {
		return nil, refusal(filepath.Join(root, rel), err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}

// OpenDirNoFollow opens the absolute directory path abs, refusing (with
// an error wrapping ErrUnsafe) a path with a symlink or ".." in any
// component.
func OpenDirNoFollow(abs string) (*os.File, error) {
	if !filepath.IsAbs(abs) {
		return nil, fmt.Errorf("%w: %q is not absolute", ErrUnsafe, abs)
	}
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	top := os.NewFile(uintptr(fd), "/")
	defer top.Close()
	return walk(top, "/", strings.TrimPrefix(abs, "/"))
}

// walk opens rel beneath dir one component at a time with O_NOFOLLOW, the
// fallback for kernels without openat2 (and the way OpenDirNoFollow takes
// an absolute path).
func walk(dir *os.File, name, rel string) (*os.File, error) { return walkMk(dir, name, rel, 0) }

// MkdirBeneath is OpenBeneath that first makes, with mode perm, each
// component of rel that does not exist (never following a symlink).
func MkdirBeneath(root, rel string, perm os.FileMode) (*os.File, error) {
	if filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%w: %q is absolute, want a path relative to %s", ErrUnsafe, rel, root)
	}
	rootF, err := OpenDirNoFollow(root)
	if err != nil {
		return nil, err
	}
	defer rootF.Close()
	return walkMk(rootF, root, rel, uint32(perm.Perm()))
}

// walkMk is walk that makes missing components with mode perm (none: 0).
func walkMk(dir *os.File, name, rel string, perm uint32) (*os.File, error) {
	cur, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	unix.CloseOnExec(cur)
	path := name
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			unix.Close(cur)
			return nil, fmt.Errorf("%w: %q has a \"..\" component", ErrUnsafe, rel)
		}
		path = filepath.Join(path, c)
		next, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && perm != 0 {
			if err = unix.Mkdirat(cur, c, perm); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(cur)
		if err != nil {
			return nil, refusal(path, err)
		}
		cur = next
	}
	return os.NewFile(uintptr(cur), path), nil
}

// refusal is the error for path that failed to open with err: ErrUnsafe
// for a symlink, a crossing out of the root or a non-directory, else err.
func refusal(path string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %s: a symlink, a non-directory or a step out of its root on the way", ErrUnsafe, path)
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// SameFile reports whether a and b are the same inode on the same device.
func SameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
