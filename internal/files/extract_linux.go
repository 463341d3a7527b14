package files

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// pendingDir is a directory whose mode and mtime are set once every entry
// is extracted (writing entries changes its mtime; a read-only mode would
// stop them).
type pendingDir struct {
	name  string
	mode  uint32
	mtime time.Time
}

// Extract reads a tar stream from r and writes its entries beneath the
// root, in constant memory (plus one small record per directory). A regular
// file that does not exist yet is created in place (O_EXCL); one that does
// is written to a temporary name renamed over it, so readers see the old
// content or the new; a file cut short by the archive's end is removed.
// Symlinks are created as links, with their targets as given (they are
// data, never followed); hard links must point at an entry beneath the
// root; modes and mtimes are preserved. The first entry that would land
// outside the root (an absolute or ".." name, a parent that is a symlink
// leading out, a hard link to outside) stops the extraction with an error
// wrapping runbox.ErrEscapesRoot; entries before it stay written, nothing
// is ever written outside the root. f must have a root.
func (f *FS) Extract(r io.Reader, o ExtractOptions) (ExtractStats, error) {
	var st ExtractStats
	if f.root == "" {
		return st, &PathError{Op: "extract", Path: "", Kind: runbox.ErrInvalidPath, Err: errors.New("extraction needs a root")}
	}
	for _, d := range o.Delete {
		name, err := CleanEntryName(d)
		if err != nil {
			return st, err
		}
		if name == "." {
			return st, &PathError{Op: "delete", Path: d, Kind: runbox.ErrInvalidPath, Err: errors.New("names the root itself")}
		}
		err = f.Remove(name, true)
		if errors.Is(err, runbox.ErrFileNotFound) {
			continue
		}
		if err != nil {
			return st, err
		}
		st.Deleted++
	}
	var dirs []pendingDir
	pc := newParents(f, "extract", true)
	defer pc.close()
	tr := tar.NewReader(r)
	buf := make([]byte, 256<<10)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, fmt.Errorf("read archive: %w", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := CleanEntryName(hdr.Name)
		if err != nil {
			return st, err
		}
		if o.Within != "" && name != o.Within && !strings.HasPrefix(name, o.Within+"/") {
			return st, &PathError{Op: "extract", Path: name, Kind: runbox.ErrEscapesRoot,
				Err: fmt.Errorf("entry outside %s", quote(o.Within))}
		}
		mode := uint32(hdr.Mode & 0o7777)
		if mode&privilegeBits != 0 {
			mode &^= privilegeBits
			st.Stripped++
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "." {
				if err := f.MkdirAll(name, 0o700); err != nil {
					return st, err
				}
				if fi, err := f.Stat(name, false); err != nil {
					return st, err
				} else if !fi.IsDir() {
					return st, &PathError{Op: "extract", Path: name, Kind: runbox.ErrNotDirectory}
				}
			}
			dirs = append(dirs, pendingDir{name: name, mode: mode, mtime: hdr.ModTime})
			st.Dirs++
		case tar.TypeReg, tar.TypeRegA:
			n, err := f.extractFile(pc, name, tr, hdr, mode, buf, o)
			st.Bytes += n
			if err != nil {
				return st, err
			}
			st.Files++
		case tar.TypeSymlink:
			if err := f.extractSymlink(pc, name, hdr); err != nil {
				return st, err
			}
			st.Links++
		case tar.TypeLink:
			if err := f.extractHardLink(pc, name, hdr); err != nil {
				return st, err
			}
			st.Files++
		default:
			return st, &PathError{Op: "extract", Path: name, Kind: runbox.ErrInvalidPath,
				Err: fmt.Errorf("entry type %q (devices, fifos...) is not supported", hdr.Typeflag)}
		}
	}
	for _, c := range o.Chtimes {
		if err := f.chtimes(c.Path, c.ModTime); err != nil && !errors.Is(err, runbox.ErrFileNotFound) {
			return st, err
		}
	}
	// Deepest first, so setting a parent read-only comes after its children.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := f.setDirMeta(d); err != nil {
			return st, err
		}
	}
	return st, nil
}

// setDirMeta applies a directory entry's mode and mtime.
func (f *FS) setDirMeta(d pendingDir) error {
	if d.name == "." {
		fd, err := f.openat("extract", ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Fchmod(fd, d.mode); err != nil {
			return pathErr("chmod", ".", err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(d.mtime.UnixNano()), unix.NsecToTimespec(d.mtime.UnixNano())}
		return pathErr("chtimes", ".", unix.UtimesNanoAt(fd, ".", ts, 0))
	}
	dirfd, base, err := f.parent("extract", d.name)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	if err := chmodDir(dirfd, base, d.mode); err != nil {
		return pathErr("chmod", d.name, err)
	}
	return pathErr("chtimes", d.name, setMtime(dirfd, base, d.mtime))
}

// chtimes sets the mtime of the entry at name beneath the root, without
// following it.
func (f *FS) chtimes(name string, t time.Time) error {
	name, err := CleanEntryName(name)
	if err != nil {
		return err
	}
	dirfd, base, err := f.parent("chtimes", name)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	return pathErr("chtimes", name, setMtime(dirfd, base, t))
}

// setMtime sets the access and modification times of name in dirfd to t,
// without following a symlink there.
func setMtime(dirfd int, name string, t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.UtimesNanoAt(dirfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// parents opens the directories that a run of entries lives in, and keeps
// the last one open: an archive (or a sorted list of entries) names a
// directory's entries together, so most entries reuse its descriptor
// instead of resolving their parent again. With create, missing parents
// are made beneath the root (0755), as extraction needs.
type parents struct {
	f      *FS
	op     string
	create bool
	dir    string
	fd     int
}

func newParents(f *FS, op string, create bool) *parents {
	return &parents{f: f, op: op, create: create, fd: -1}
}

// open returns the descriptor of name's parent (O_PATH, owned by p) and
// name's last component.
func (p *parents) open(name string) (int, string, error) {
	if name == "." {
		return -1, "", &PathError{Op: p.op, Path: name, Kind: runbox.ErrInvalidPath, Err: errors.New("only a directory can name the root")}
	}
	dir, base := path.Dir(name), path.Base(name)
	if p.fd >= 0 && p.dir == dir {
		return p.fd, base, nil
	}
	p.close()
	if p.create && dir != "." {
		if err := p.f.MkdirAll(dir, 0o755); err != nil {
			return -1, "", err
		}
	}
	fd, err := p.f.openat(p.op, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		if pe, ok := err.(*PathError); ok {
			pe.Path = name
		}
		return -1, "", err
	}
	p.dir, p.fd = dir, fd
	return fd, base, nil
}

func (p *parents) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// extractFile writes a regular file entry and returns the bytes written. A
// name that does not exist yet is created in place (O_EXCL, so nothing
// there is followed or overwritten); an existing one is replaced
// atomically, through a temporary file renamed over it.
func (f *FS) extractFile(pc *parents, name string, r io.Reader, hdr *tar.Header, mode uint32, buf []byte, o ExtractOptions) (int64, error) {
	dirfd, base, err := pc.open(name)
	if err != nil {
		return 0, err
	}
	created := base
	fd, err := unix.Openat(dirfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o777)
	tmp := ""
	if err == unix.EEXIST {
		fd, tmp, err = createTemp(dirfd)
		created = tmp
	}
	if err != nil {
		return 0, pathErr("extract", name, err)
	}
	ok := false
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if !ok {
			unix.Unlinkat(dirfd, created, 0)
		}
	}()
	var h hash.Hash
	if o.Cache != nil {
		h = sha256.New()
	}
	var n int64
	for n < hdr.Size {
		chunk := buf[:min(int64(len(buf)), hdr.Size-n)]
		k, err := io.ReadFull(r, chunk)
		if k > 0 {
			if werr := writeFull(fd, chunk[:k]); werr != nil {
				return n, pathErr("extract", name, werr)
			}
			if h != nil {
				h.Write(chunk[:k])
			}
			n += int64(k)
			if o.Progress != nil {
				o.Progress(int64(k))
			}
		}
		if err != nil {
			return n, fmt.Errorf("read archive entry %s: %w", quote(name), err)
		}
	}
	if err := setMtime(dirfd, created, hdr.ModTime); err != nil {
		return n, pathErr("chtimes", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return n, pathErr("extract", name, err)
	}
	// The mode given to open is masked by the umask (and a temporary file
	// starts 0600): set it exactly, when it is not already.
	if st.Mode&0o7777 != mode {
		if err := unix.Fchmod(fd, mode); err != nil {
			return n, pathErr("chmod", name, err)
		}
	}
	err = unix.Close(fd)
	fd = -1
	if err != nil {
		return n, pathErr("extract", name, err)
	}
	if tmp != "" {
		if err := unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
			return n, pathErr("extract", name, err)
		}
	}
	ok = true
	if h != nil {
		o.Cache.put(st.Dev, st.Ino, st.Size, st.Mtim.Nano(), h.Sum(nil))
	}
	return n, nil
}

// writeFull writes all of b to fd.
func writeFull(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFull fills b from fd; it stops early only at the end of the file,
// returning how much it read.
func readFull(fd int, b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Read(fd, b[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

// extractSymlink creates a symlink entry (replacing what is at its name,
// unless that is a directory).
func (f *FS) extractSymlink(pc *parents, name string, hdr *tar.Header) error {
	if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
		return &PathError{Op: "extract", Path: name, Kind: runbox.ErrInvalidPath, Err: errors.New("symlink with an empty or NUL target")}
	}
	dirfd, base, err := pc.open(name)
	if err != nil {
		return err
	}
	tmp, err := tempName(func(n string) error { return unix.Symlinkat(hdr.Linkname, dirfd, n) })
	if err != nil {
		return pathErr("symlink", name, err)
	}
	if err := setMtime(dirfd, tmp, hdr.ModTime); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return pathErr("chtimes", name, err)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return pathErr("symlink", name, err)
	}
	return nil
}

// extractHardLink links name to an earlier entry, which must lie beneath
// the root (its name is checked like any entry's, and its parent is
// resolved beneath the root; the link's last component is not followed).
func (f *FS) extractHardLink(pc *parents, name string, hdr *tar.Header) error {
	target, err := CleanEntryName(hdr.Linkname)
	if err != nil {
		return &PathError{Op: "extract hard link", Path: name + " => " + hdr.Linkname, Kind: runbox.ErrEscapesRoot, Err: err}
	}
	ofd, obase, err := f.parent("extract hard link", target)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	dirfd, base, err := pc.open(name)
	if err != nil {
		return err
	}
	tmp, err := tempName(func(n string) error { return unix.Linkat(ofd, obase, dirfd, n, 0) })
	if err != nil {
		return pathErr("link", name+" => "+target, err)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, base); err != nil {
		unix.Unlinkat(dirfd, tmp, 0)
		return pathErr("link", name, err)
	}
	return nil
}

// tempName calls create with fresh temporary names until one does not
// exist yet, and returns it.
func tempName(create func(name string) error) (string, error) {
	for range 10 {
		name := randomTempName()
		err := create(name)
		if err == unix.EEXIST {
			continue
		}
		return name, err
	}
	return "", unix.EEXIST
}
