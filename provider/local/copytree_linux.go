package local

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// copyMode says how copyTree copies a regular file.
type copyMode int

const (
	// cloneFiles copies each file's data, sharing its blocks with the
	// original where the filesystem can (FICLONE: btrfs, xfs), as
	// cp --reflink=auto does.
	cloneFiles copyMode = iota
	// linkFiles hard-links each file: the copy shares the original's
	// inode, which is right only for a layer nothing ever writes (a
	// snapshot's, stacked read-only).
	linkFiles
)

// copyTree copies the tree at src to dst (which must not exist), keeping
// owners, modes, extended attributes (an overlay's whiteout and opaque
// marks among them), times, symbolic links and device nodes (an overlay's
// whiteouts). It never follows a symbolic link. Hard links inside src
// become separate files. With linkFiles, a file that cannot be linked
// because dst is on another filesystem or the file has as many links as
// its filesystem allows is copied.
func copyTree(src, dst string, mode copyMode) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return fmt.Errorf("copy %s: %w", path, err)
		}
		perm := uint32(st.Mode) & 0o7777
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			// Owner-writable while it is filled; its mode is set below.
			if err := unix.Mkdir(to, 0o700); err != nil {
				return fmt.Errorf("copy %s: %w", path, err)
			}
		case unix.S_IFREG:
			if mode == linkFiles {
				err := os.Link(path, to)
				if err == nil {
					return nil // one inode: owner, mode and xattrs are the original's
				}
				// dst on another filesystem, or the inode at the
				// filesystem's link limit: a copy of its own.
				if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EMLINK) {
					return fmt.Errorf("link %s: %w", path, err)
				}
			}
			if err := cloneFile(path, to, perm); err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(path)
			if err != nil {
				return fmt.Errorf("copy %s: %w", path, err)
			}
			if err := os.Symlink(target, to); err != nil {
				return fmt.Errorf("copy %s: %w", path, err)
			}
		case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
			if err := unix.Mknod(to, st.Mode, int(st.Rdev)); err != nil {
				return fmt.Errorf("copy %s: %w", path, err)
			}
		default: // sockets: nothing to keep
			return nil
		}
		if err := unix.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("copy %s: owner: %w", path, err)
		}
		if err := copyXattrs(path, to); err != nil {
			return fmt.Errorf("copy %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			// After chown, which clears setuid and setgid bits.
			if err := unix.Chmod(to, perm); err != nil {
				return fmt.Errorf("copy %s: mode: %w", path, err)
			}
		}
		ts := []unix.Timespec{st.Atim, st.Mtim}
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, to, ts, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	})
}

// cloneFile copies a regular file's data: a reflink where the filesystem
// has them, else a copy (copy_file_range through io.Copy).
func cloneFile(src, dst string, perm uint32) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(perm&0o777)|0o200)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err != nil {
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return fmt.Errorf("copy %s: %w", src, err)
		}
	}
	return out.Close()
}

// copyXattrs copies every extended attribute of src that dst can take.
// Attributes the caller may not set (a namespace it lacks) are left out.
func copyXattrs(src, dst string) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(src, buf)
	if err != nil {
		return err
	}
	for _, name := range splitNul(buf[:size]) {
		n, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(src, name, val); err != nil {
			continue
		}
		if err := unix.Lsetxattr(dst, name, val[:n], 0); err != nil && !errors.Is(err, unix.ENOTSUP) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

func splitNul(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}

// diskUsage sums the disk blocks of the files under dir.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		var st unix.Stat_t
		if err == nil && unix.Lstat(path, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}
