package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// resolveRetries bounds how often a resolution that the kernel aborted with
// EAGAIN (a rename raced with RESOLVE_BENEATH's checks) is retried.
const resolveRetries = 16

// Open returns an FS rooted at the directory root: paths given to it are
// resolved beneath root, and a path that would leave it (.., an absolute
// path, a symlink pointing outside, a magic /proc link) fails with
// runbox.ErrEscapesRoot. root itself is resolved as usual (symlinks
// followed). An empty root means no root: paths are resolved as usual,
// relative ones against the working directory, and only /proc magic links
// are refused.
func Open(root string) (*FS, error) {
	if root == "" {
		return &FS{fd: unix.AT_FDCWD, resolve: unix.RESOLVE_NO_MAGICLINKS}, nil
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("open root", root, err)
	}
	return &FS{fd: fd, root: root, resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS, owned: true}, nil
}

// Sub returns an FS rooted at the directory p beneath f. With create, p
// and its missing parents are created first (mode 0755).
func (f *FS) Sub(p string, create bool) (*FS, error) {
	if create {
		if err := f.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	fd, err := f.openat("open", p, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	name := p
	if f.root != "" && !path.IsAbs(p) {
		name = path.Join(f.root, p)
	}
	return &FS{fd: fd, root: name, resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS, owned: true}, nil
}

// Root returns the root as given to Open ("" for none).
func (f *FS) Root() string { return f.root }

// Close releases the root's descriptor.
func (f *FS) Close() error {
	if f.owned {
		f.owned = false
		return unix.Close(f.fd)
	}
	return nil
}

// clean cleans p lexically; "" is the root itself.
func clean(p string) string {
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

// checkNUL refuses a path with a NUL byte, which no system call can take
// (a client other than Go's sends one as it is: without this the kernel's
// EINVAL reached it as an internal error).
func checkNUL(op, p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return &PathError{Op: op, Path: p, Kind: runbox.ErrInvalidPath, Err: errors.New("path has a NUL byte")}
	}
	return nil
}

// openat resolves p beneath the root with openat2 and opens it with flags
// (O_CLOEXEC added). The final component is followed unless flags has
// O_NOFOLLOW.
func (f *FS) openat(op, p string, flags int, mode uint32) (int, error) {
	if err := checkNUL(op, p); err != nil {
		return -1, err
	}
	c := clean(p)
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: f.resolve}
	for range resolveRetries {
		fd, err := unix.Openat2(f.fd, c, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, resolveErr(op, p, err)
		}
		return fd, nil
	}
	return -1, resolveErr(op, p, unix.EAGAIN)
}

// parent opens the directory holding p beneath the root and returns its
// descriptor (O_PATH) and p's last component, which is never "", "." or
// "..".
func (f *FS) parent(op, p string) (int, string, error) {
	if err := checkNUL(op, p); err != nil {
		return -1, "", err
	}
	c := clean(p)
	dir, base := path.Split(c)
	if base == "." || base == ".." || base == "" || c == "/" {
		if base == ".." && f.root != "" {
			return -1, "", &PathError{Op: op, Path: p, Kind: runbox.ErrEscapesRoot}
		}
		return -1, "", &PathError{Op: op, Path: p, Kind: runbox.ErrInvalidPath, Err: errors.New("names the root itself")}
	}
	if dir == "" {
		dir = "."
	} else if dir != "/" {
		dir = strings.TrimSuffix(dir, "/")
	}
	fd, err := f.openat(op, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		// Name the path asked for, not its parent.
		if pe, ok := err.(*PathError); ok {
			pe.Path = p
		}
		return -1, "", err
	}
	return fd, base, nil
}

// infoFromStat describes st as a runbox.FileInfo named name.
func infoFromStat(name string, st *unix.Stat_t) runbox.FileInfo {
	m := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	default:
		m |= fs.ModeIrregular
	}
	return runbox.FileInfo{
		Path:    name,
		Mode:    m,
		Size:    st.Size,
		ModTime: time.Unix(st.Mtim.Unix()),
	}
}

// unixMode converts the permission and sticky bits of m to the chmod(2)
// bits runbox applies. Setuid and setgid are never applied (security rule
// 4: no privilege bit leaves a sandbox, through runboxd's writes or through
// a pull to the caller's side).
func unixMode(m fs.FileMode) uint32 { return modeBits(m) &^ privilegeBits }

// modeBits converts the permission, setuid, setgid and sticky bits of m to
// their stat(2) bits, to report them (an archive's header).
func modeBits(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}

// readlinkat reads the target of the symlink name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// statAt describes the entry name of dirfd without following it, with its
// link target when it is a symlink.
func statAt(dirfd int, name, display string) (runbox.FileInfo, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return runbox.FileInfo{}, nil, err
	}
	fi := infoFromStat(display, &st)
	if fi.IsSymlink() {
		t, err := readlinkat(dirfd, name)
		if err != nil {
			return runbox.FileInfo{}, nil, err
		}
		fi.LinkTarget = t
	}
	return fi, &st, nil
}

// Stat describes p. The final component is not followed unless follow is
// set (symlinks on the way always are, beneath the root).
func (f *FS) Stat(p string, follow bool) (runbox.FileInfo, error) {
	c := clean(p)
	if follow || c == "." || c == "/" {
		fd, err := f.openat("stat", p, unix.O_PATH, 0)
		if err != nil {
			return runbox.FileInfo{}, err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return runbox.FileInfo{}, pathErr("stat", p, err)
		}
		return infoFromStat(p, &st), nil
	}
	dirfd, base, err := f.parent("stat", p)
	if err != nil {
		return runbox.FileInfo{}, err
	}
	defer unix.Close(dirfd)
	fi, _, err := statAt(dirfd, base, p)
	if err != nil {
		return runbox.FileInfo{}, pathErr("stat", p, err)
	}
	return fi, nil
}

// OpenFile opens the regular file p for reading, following symlinks beneath
// the root. A directory is runbox.ErrIsDirectory.
func (f *FS) OpenFile(p string) (*os.File, runbox.FileInfo, error) {
	fd, err := f.openat("open", p, unix.O_RDONLY, 0)
	if err != nil {
		return nil, runbox.FileInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, runbox.FileInfo{}, pathErr("open", p, err)
	}
	fi := infoFromStat(p, &st)
	if fi.IsDir() {
		unix.Close(fd)
		return nil, runbox.FileInfo{}, &PathError{Op: "open", Path: p, Kind: runbox.ErrIsDirectory}
	}
	return os.NewFile(uintptr(fd), p), fi, nil
}

// openDir opens the directory p beneath the root for reading its entries.
func (f *FS) openDir(op, p string) (*os.File, error) {
	fd, err := f.openat(op, p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// walkFunc is called for each entry of a walk: dirfd is the directory
// holding it, name its name there, rel its slash path relative to the
// walk's start. Returning errSkipDir for a directory skips its entries.
type walkFunc func(dirfd int, name, rel string, fi runbox.FileInfo, st *unix.Stat_t) error

// errSkipDir tells walk not to descend into a directory.
var errSkipDir = errors.New("skip directory")

// walk calls fn for every entry beneath the open directory dir, in lexical
// order, parents before children, descending at most depth levels (0: no
// limit). It descends through directory descriptors opened with O_NOFOLLOW,
// so it never follows a symlink, whatever changes under it.
func walk(dir *os.File, rel string, depth int, fn walkFunc) error {
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return pathErr("read directory", relOrDot(rel), err)
	}
	slices.Sort(names)
	dirfd := int(dir.Fd())
	for _, name := range names {
		crel := name
		if rel != "" {
			crel = rel + "/" + name
		}
		fi, st, err := statAt(dirfd, name, crel)
		if errors.Is(err, syscall.ENOENT) {
			continue // removed while we walked
		}
		if err != nil {
			return pathErr("stat", crel, err)
		}
		err = fn(dirfd, name, crel, fi, st)
		if errors.Is(err, errSkipDir) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() || depth == 1 {
			continue
		}
		cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, syscall.ENOENT) {
			continue
		}
		if err != nil {
			return pathErr("open", crel, err)
		}
		child := os.NewFile(uintptr(cfd), crel)
		err = walk(child, crel, max(depth-1, 0), fn)
		child.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func relOrDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// List calls fn for the entries of directory p (paths relative to p), in
// lexical order; with depth > 1 or 0 (no limit), recursively, parents before
// children. Symlinks are listed, never followed.
func (f *FS) List(p string, depth int, fn func(runbox.FileInfo) error) error {
	dir, err := f.openDir("list", p)
	if err != nil {
		return err
	}
	defer dir.Close()
	return walk(dir, "", depth, func(_ int, _, _ string, fi runbox.FileInfo, _ *unix.Stat_t) error { return fn(fi) })
}

// Mkdir creates directory p with mode perm (not masked by the umask); with
// parents, missing parents too (0755) and an existing directory is not an
// error.
func (f *FS) Mkdir(p string, perm fs.FileMode, parents bool) error {
	if parents {
		if err := f.MkdirAll(path.Dir(clean(p)), 0o755); err != nil {
			return err
		}
	}
	dirfd, base, err := f.parent("mkdir", p)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	err = unix.Mkdirat(dirfd, base, 0o700)
	if err == unix.EEXIST && parents {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, base, &st, 0); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return &PathError{Op: "mkdir", Path: p, Kind: runbox.ErrNotDirectory, Err: unix.EEXIST}
		}
		return nil
	}
	if err != nil {
		return pathErr("mkdir", p, err)
	}
	return pathErr("mkdir", p, chmodDir(dirfd, base, unixMode(perm)))
}

// chmodDir sets the mode of the directory name in dirfd, exactly (no
// umask), refusing to follow a symlink there.
func chmodDir(dirfd int, name string, mode uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode)
}

// MkdirAll creates directory p and its missing parents with mode perm.
func (f *FS) MkdirAll(p string, perm fs.FileMode) error {
	c := clean(p)
	fd, err := f.openat("mkdir", c, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, runbox.ErrFileNotFound) || c == "." || c == "/" {
		return err
	}
	if err := f.MkdirAll(path.Dir(c), perm); err != nil {
		return err
	}
	dirfd, base, err := f.parent("mkdir", c)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	if err := unix.Mkdirat(dirfd, base, unixMode(perm)); err != nil && err != unix.EEXIST {
		return pathErr("mkdir", p, err)
	}
	return nil
}

// Remove removes p: a file, a symlink (not what it points to), an empty
// directory, or with recursive a whole tree. The root itself cannot be
// removed.
func (f *FS) Remove(p string, recursive bool) error {
	dirfd, base, err := f.parent("remove", p)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	return pathErr("remove", p, removeAt(dirfd, base, recursive))
}

// removeAt removes name in dirfd, a tree when recursive.
func removeAt(dirfd int, name string, recursive bool) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return err
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	var st unix.Stat_t
	if serr := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return err
	}
	if recursive {
		cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(cfd), name)
		names, err := d.Readdirnames(-1)
		if err == nil {
			for _, n := range names {
				if err = removeAt(cfd, n, true); err != nil && err != unix.ENOENT {
					break
				}
				err = nil
			}
		}
		d.Close()
		if err != nil {
			return err
		}
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// Move renames from to to (both beneath the root), replacing to when it is
// a file or an empty directory.
func (f *FS) Move(from, to string) error {
	ofd, obase, err := f.parent("move", from)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nbase, err := f.parent("move", to)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	if err := unix.Renameat(ofd, obase, nfd, nbase); err != nil {
		return pathErr("move", from+" to "+to, err)
	}
	return nil
}

// WriteFile writes r to p and returns p's info after the write. By default
// the file is replaced atomically: readers see the old content or the new,
// and a symlink at p is replaced, not followed.
func (f *FS) WriteFile(p string, r io.Reader, o WriteOptions) (runbox.FileInfo, error) {
	if o.Perm == 0 {
		o.Perm = 0o644
	}
	if o.Parents {
		if err := f.MkdirAll(path.Dir(clean(p)), 0o755); err != nil {
			return runbox.FileInfo{}, err
		}
	}
	dirfd, base, err := f.parent("write", p)
	if err != nil {
		return runbox.FileInfo{}, err
	}
	defer unix.Close(dirfd)
	var (
		fd  int
		tmp string
	)
	if o.InPlace {
		fd, err = unix.Openat(dirfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.ELOOP {
			return runbox.FileInfo{}, &PathError{Op: "write", Path: p, Kind: runbox.ErrInvalidPath, Err: errors.New("is a symlink (in-place writes do not follow links)")}
		}
	} else {
		fd, tmp, err = createTemp(dirfd)
	}
	if err != nil {
		return runbox.FileInfo{}, pathErr("write", p, err)
	}
	file := os.NewFile(uintptr(fd), p)
	fail := func(err error) (runbox.FileInfo, error) {
		file.Close()
		if tmp != "" {
			unix.Unlinkat(dirfd, tmp, 0)
		}
		return runbox.FileInfo{}, pathErr("write", p, err)
	}
	if _, err := io.Copy(file, r); err != nil {
		return fail(err)
	}
	if err := unix.Fchmod(fd, unixMode(o.Perm)); err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(err)
	}
	if err := file.Close(); err != nil {
		return fail(err)
	}
	if tmp != "" {
		if err := unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
			unix.Unlinkat(dirfd, tmp, 0)
			return runbox.FileInfo{}, pathErr("write", p, err)
		}
	}
	return infoFromStat(p, &st), nil
}

// tempPrefix starts the names of temporary files runbox writes before
// renaming them into place.
const tempPrefix = ".runbox-tmp-"

// randomTempName returns a fresh temporary file name.
func randomTempName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return tempPrefix + hex.EncodeToString(b)
}

// createTemp creates a new empty file (0600) in dirfd under a random name.
func createTemp(dirfd int) (int, string, error) {
	for range 10 {
		name := randomTempName()
		fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST {
			continue
		}
		return fd, name, err
	}
	return -1, "", unix.EEXIST
}
