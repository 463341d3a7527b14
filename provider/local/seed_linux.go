package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// seedRoots are the host directories system tools write to in place:
// package managers' locks and state (/var/lib/dpkg, /var/lib/apt,
// /var/cache/apt, /var/cache/debconf), account tools' lock (/etc/.pwd.lock),
// logs. See seedUnreadable.
var seedRoots = []string{"/etc", "/var/lib", "/var/cache", "/var/log"}

// seedDepth is how far below each of seedRoots seedUnreadable looks.
const seedDepth = 3

// seedLimit bounds the entries seedUnreadable visits, so a host with a
// huge /var/lib costs a sandbox's creation a bounded time.
const seedLimit = 50000

// seedUnreadable gives the sandbox, in its upper layer at upper, an empty
// file of its own in place of each host file under seedRoots that an
// unprivileged stranger may not read, but may reach (only through
// directories others can search), and an empty directory of its own in
// place of each such directory it may not enter, with the host's mode and
// owner.
//
// The FUSE server reads the host's files as such a stranger, so it cannot
// copy one of those up for writing: without this, apt-get could not take
// dpkg's lock (/var/lib/dpkg/lock-frontend, 0640) nor download into its
// partial directory (/var/cache/apt/archives/partial, 0700 _apt), and
// useradd could not take /etc's lock (/etc/.pwd.lock, 0600). Only the files' metadata is read here, never their
// contents: what the sandbox gets is empty, so this restores the tools'
// use of those paths without widening what it can read. Files already in
// upper (the sanitised password files) are kept.
func seedUnreadable(root, upper string, m idMap) error {
	visited := 0
	var errs []error
	for _, top := range seedRoots {
		base := filepath.Join(root, top)
		fi, err := os.Lstat(base)
		if err != nil || !fi.IsDir() || !searchableByOthers(fi) {
			continue
		}
		var rootDev uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			rootDev = st.Dev
		}
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if visited++; visited > seedLimit {
				return filepath.SkipAll
			}
			rel, _ := filepath.Rel(base, p)
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok || st.Dev != rootDev {
				// Another filesystem: not in the sandbox's lower layer.
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				if p == base {
					return nil
				}
				if !searchableByOthers(fi) {
					if err := seedEmptyDir(upper, root, filepath.Join(top, rel), m); err != nil {
						errs = append(errs, err)
					}
					return filepath.SkipDir
				}
				if depth(rel) >= seedDepth {
					return filepath.SkipDir
				}
				return nil
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 != 0 {
				return nil
			}
			if err := seedEmpty(upper, root, filepath.Join(top, rel), fi, m); err != nil {
				errs = append(errs, err)
			}
			return nil
		})
	}
	return errors.Join(errs...)
}

// searchableByOthers reports whether a stranger may pass through the
// directory fi describes.
func searchableByOthers(fi os.FileInfo) bool { return fi.Mode().Perm()&0o001 != 0 }

// depth is how many components the relative path rel has.
func depth(rel string) int {
	if rel == "." {
		return 0
	}
	n := 1
	for _, c := range rel {
		if c == filepath.Separator {
			n++
		}
	}
	return n
}

// seedEmpty makes path (of the host's root at root, described by fi) an
// empty file like the host's under upper, with its parent directories made
// like the host's, unless it is there already.
func seedEmpty(upper, root, path string, fi os.FileInfo, m idMap) error {
	dst, host := filepath.Join(upper, path), filepath.Join(root, path)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := mkdirsLike(upper, root, filepath.Dir(path), m); err != nil {
		return fmt.Errorf("seed %s: %w", host, err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return fmt.Errorf("seed %s: %w", host, err)
	}
	f.Close()
	if err := os.Chmod(dst, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("seed %s: %w", host, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := lchownMapped(dst, int(st.Uid), int(st.Gid), m); err != nil {
		return fmt.Errorf("seed %s: %w", host, err)
	}
	return nil
}

// opaqueMarker is the file fuse-overlayfs reads, in an upper directory, as
// "hide everything below in the lower layers".
const opaqueMarker = ".wh..wh..opq"

// seedEmptyDir makes dir (of the host's root at root) an empty directory
// like the host's under upper, opaque (nothing of the host's shows
// through), unless it is there already.
func seedEmptyDir(upper, root, dir string, m idMap) error {
	dst := filepath.Join(upper, dir)
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := mkdirsLike(upper, root, dir, m); err != nil {
		return fmt.Errorf("seed %s: %w", dir, err)
	}
	marker := filepath.Join(dst, opaqueMarker)
	if err := os.WriteFile(marker, nil, 0o700); err != nil {
		return fmt.Errorf("seed %s: %w", dir, err)
	}
	return m.chown(marker)
}

// seedMountPoints makes each directory of dirs that the host's root at
// root lacks in the upper layer at upper, as the sandbox root's, mode 0700
// (what the jail gives the directories it makes), with the directories
// above it like the host's. The jail mounts over them (the workspace, the
// spill directory); made here, before the root's server starts, they need
// no write through it while the sandbox starts. (fuse-overlayfs 1.10
// answered the jail's mkdir of /workspace with ENOENT about once in 180
// starts under load.)
func seedMountPoints(root, upper string, dirs []string, m idMap) error {
	for _, dir := range dirs {
		if _, err := os.Lstat(filepath.Join(root, dir)); err == nil {
			continue // the host has it: the jail mounts over the host's
		}
		dst := filepath.Join(upper, dir)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if err := mkdirsLike(upper, root, filepath.Dir(dir), m); err != nil {
			return fmt.Errorf("mount point %s: %w", dir, err)
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("mount point %s: %w", dir, err)
		}
		if err := lchownMapped(dst, 0, 0, m); err != nil {
			return fmt.Errorf("mount point %s: %w", dir, err)
		}
	}
	return nil
}
