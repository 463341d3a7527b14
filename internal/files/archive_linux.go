package files

import (
	"archive/tar"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// Archive writes p (a tree, a file or a symlink, never followed at its last
// component) to w as a tar stream, in constant memory. Regular files,
// directories and symlinks are archived with their modes and mtimes
// (nanoseconds, PAX); devices, fifos and sockets are left out.
func (f *FS) Archive(w io.Writer, p string, o ArchiveOptions) error {
	tw := tar.NewWriter(w)
	a := &archiver{tw: tw, o: o, buf: make([]byte, 256<<10)}
	if err := f.archive(a, p); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}

type archiver struct {
	tw  *tar.Writer
	o   ArchiveOptions
	buf []byte
}

func (f *FS) archive(a *archiver, p string) error {
	fi, err := f.Stat(p, false)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if len(a.o.Entries) > 0 {
			return &PathError{Op: "archive", Path: p, Kind: runbox.ErrNotDirectory}
		}
		name := a.o.Name
		if name == "" {
			name = path.Base(clean(p))
		}
		dirfd, base, err := f.parent("archive", p)
		if err != nil {
			return err
		}
		defer unix.Close(dirfd)
		fi, st, err := statAt(dirfd, base, name)
		if err != nil {
			return pathErr("archive", p, err)
		}
		return a.entry(dirfd, base, name, fi, st)
	}
	dir, err := f.openDir("archive", p)
	if err != nil {
		return err
	}
	defer dir.Close()
	prefix := ""
	if a.o.Name != "" {
		var st unix.Stat_t
		if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
			return pathErr("archive", p, err)
		}
		if err := a.entry(-1, "", a.o.Name, infoFromStat(a.o.Name, &st), &st); err != nil {
			return err
		}
		prefix = strings.TrimSuffix(a.o.Name, "/") + "/"
	}
	if len(a.o.Entries) > 0 {
		sub := &FS{fd: int(dir.Fd()), root: path.Join(f.root, p), resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}
		pc := newParents(sub, "archive", false)
		defer pc.close()
		for _, e := range a.o.Entries {
			rel, err := CleanEntryName(e)
			if err != nil {
				return err
			}
			if rel == "." {
				continue
			}
			dirfd, base, err := pc.open(rel)
			if err != nil {
				return err
			}
			if err := a.entryNamed(dirfd, base, prefix+rel); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(dir, "", 0, func(dirfd int, name, rel string, fi runbox.FileInfo, st *unix.Stat_t) error {
		if a.o.Exclude.excludedHere(rel, fi.IsDir()) {
			return errSkipDir
		}
		return a.entry(dirfd, name, prefix+rel, fi, st)
	})
}

// openToRead are the flags an entry is opened with for archiving: never
// through a symlink, and without blocking on a fifo or taking a terminal
// should one have replaced the file.
const openToRead = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// entryNamed writes the entry name of dirfd, named by a caller (an entry of a
// manifest) rather than found by a walk: it is opened first, so a regular
// file or a directory costs one open and one fstat; what cannot be opened
// that way (a symlink, an unreadable directory, a socket) is described by
// lstat instead.
func (a *archiver) entryNamed(dirfd int, name, aname string) error {
	fd, err := unix.Openat(dirfd, name, openToRead, 0)
	if err == nil {
		defer unix.Close(fd)
		return a.opened(fd, aname)
	}
	fi, st, err := statAt(dirfd, name, aname)
	if err != nil {
		return pathErr("archive", aname, err)
	}
	return a.entry(dirfd, name, aname, fi, st)
}

// entry writes one entry: name in dirfd (dirfd < 0: a directory already
// described by fi) under the archive name aname.
func (a *archiver) entry(dirfd int, name, aname string, fi runbox.FileInfo, st *unix.Stat_t) error {
	switch {
	case fi.IsDir(), fi.IsSymlink():
		return a.writeHeader(header(aname, fi, st))
	case !fi.IsRegular():
		return nil // devices, fifos, sockets: not archived
	}
	fd, err := unix.Openat(dirfd, name, openToRead, 0)
	if err != nil {
		return pathErr("archive", aname, err)
	}
	defer unix.Close(fd)
	return a.opened(fd, aname)
}

// header describes a directory, a symlink or a regular file (its size
// included) as a tar header named aname.
func header(aname string, fi runbox.FileInfo, st *unix.Stat_t) *tar.Header {
	hdr := &tar.Header{
		Name:    aname,
		Mode:    int64(modeBits(fi.Mode)),
		ModTime: fi.ModTime,
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		Format:  tar.FormatPAX,
	}
	switch {
	case fi.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name = strings.TrimSuffix(aname, "/") + "/"
	case fi.IsSymlink():
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = fi.LinkTarget
	default:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = fi.Size
	}
	return hdr
}

// opened writes the entry open at fd, as it is now: a regular file with its
// content, a directory as a directory; anything else (a file replaced since
// it was looked at) is left out.
func (a *archiver) opened(fd int, aname string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return pathErr("archive", aname, err)
	}
	fi := infoFromStat(aname, &st)
	if fi.IsDir() {
		return a.writeHeader(header(aname, fi, &st))
	}
	if !fi.IsRegular() {
		return nil
	}
	hdr := header(aname, fi, &st)
	if err := a.writeHeader(hdr); err != nil {
		return err
	}
	var n int64
	for n < hdr.Size {
		want := int(min(int64(len(a.buf)), hdr.Size-n))
		k, err := readFull(fd, a.buf[:want])
		if k > 0 {
			if _, werr := a.tw.Write(a.buf[:k]); werr != nil {
				return fmt.Errorf("write archive: %w", werr)
			}
			n += int64(k)
			if a.o.Progress != nil {
				a.o.Progress(int64(k))
			}
		}
		if err != nil {
			return pathErr("archive", aname, err)
		}
		if k < want {
			return fmt.Errorf("archive %s: file shrank from %d to %d bytes while being read", quote(aname), hdr.Size, n)
		}
	}
	return nil
}

func (a *archiver) writeHeader(hdr *tar.Header) error {
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write archive entry %s: %w", quote(hdr.Name), err)
	}
	return nil
}
