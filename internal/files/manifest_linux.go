package files

import (
	"crypto/sha256"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// Manifest calls fn for every entry beneath directory p (paths relative to
// p, parents before children, symlinks never followed), leaving out what
// exclude matches. Regular files carry their sha256 when cache knows it for
// their current size and mtime; Manifest never reads file contents (see
// HashFile).
func (f *FS) Manifest(p string, exclude *Matcher, cache *HashCache, fn func(runbox.FileInfo) error) error {
	dir, err := f.openDir("manifest", p)
	if err != nil {
		return err
	}
	defer dir.Close()
	return walk(dir, "", 0, func(_ int, _, rel string, fi runbox.FileInfo, st *unix.Stat_t) error {
		if exclude.excludedHere(rel, fi.IsDir()) {
			return errSkipDir
		}
		if fi.IsRegular() {
			fi.SHA256 = cache.get(st.Dev, st.Ino, st.Size, st.Mtim.Nano())
		}
		return fn(fi)
	})
}

// HashFile returns the sha256 of the regular file p (its last component
// not followed), from cache when its size and mtime are those it was last
// hashed with, else by reading it (and recording the result in cache).
func (f *FS) HashFile(p string, cache *HashCache) ([]byte, error) {
	dirfd, base, err := f.parent("hash", p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("hash", p, err)
	}
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, pathErr("hash", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &PathError{Op: "hash", Path: p, Kind: runbox.ErrInvalidPath, Err: unix.EINVAL}
	}
	if sum := cache.get(st.Dev, st.Ino, st.Size, st.Mtim.Nano()); sum != nil {
		return sum, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		return nil, pathErr("hash", p, err)
	}
	sum := h.Sum(nil)
	cache.put(st.Dev, st.Ino, st.Size, st.Mtim.Nano(), sum)
	return sum, nil
}
