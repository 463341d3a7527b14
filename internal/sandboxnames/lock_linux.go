package sandboxnames

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Every file of the index is reached through a descriptor of its
// directory, opened without following a link and checked (fstat) to be
// this user's, or its home's owner's when no one else may write in the
// home (dirFD): in a directory another user owns, anything may have been
// planted or swapped, so the index is not read or written there
// (ErrNotOwn). Within it, nothing is opened through a link, a FIFO or a
// device: a name's entry is read only when it is a regular file of at
// most maxEntry bytes; a write goes to a fresh file (O_EXCL) renamed over
// the entry; the lock file is opened O_NOFOLLOW.

// maxEntry bounds an entry file: a provider, an id, a pid and a start
// time take a hundred bytes.
const maxEntry = 4096

// dirFD is the index's directory, open, and the one other user besides
// this one whose files in it are trusted: its owner, when that is also
// the owner of a home no one else may write in (root using a user's home;
// a home in a shared directory trusts only the caller).
type dirFD struct{ fd, owner int }

// openDir opens the index's directory (made 0700 first when create),
// checked to be this user's or its home owner's (dirFD) and made 0700 when
// looser. It returns fs.ErrNotExist (wrapped) when there is none and
// create is false.
func (x Index) openDir(create bool) (dirFD, error) {
	if create {
		if err := os.MkdirAll(x.dir, 0o700); err != nil {
			return dirFD{}, fmt.Errorf("name index: %w", err)
		}
	}
	fd, err := unix.Open(x.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return dirFD{}, fmt.Errorf("name index %s: %w", x.dir, noLink(err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return dirFD{}, fmt.Errorf("name index %s: %w", x.dir, err)
	}
	if int(st.Uid) != os.Geteuid() && !x.homeOwnedAlone(st.Uid) {
		unix.Close(fd)
		return dirFD{}, fmt.Errorf("name index %s: owned by uid %d, neither %d nor the owner of a home only its owner may write in: %w", x.dir, st.Uid, os.Geteuid(), ErrNotOwn)
	}
	if st.Mode&0o7777 != 0o700 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			unix.Close(fd)
			return dirFD{}, fmt.Errorf("name index %s: %w", x.dir, err)
		}
	}
	return dirFD{fd: fd, owner: int(st.Uid)}, nil
}

// homeOwnedAlone reports whether the index's home belongs to uid and no
// one else may add entries to it (so no one else could have made the
// index's directory there).
func (x Index) homeOwnedAlone(uid uint32) bool {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Dir(x.dir), &st); err != nil {
		return false
	}
	return st.Uid == uid && st.Mode&0o022 == 0
}

// locked runs f with the index's directory (openDir) holding its lock.
func (x Index) locked(f func(dir dirFD) error) error {
	dir, err := x.openDir(true)
	if err != nil {
		return err
	}
	defer unix.Close(dir.fd)
	lock, err := unix.Openat(dir.fd, lockFile, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("name index lock: %w", noLink(err))
	}
	defer unix.Close(lock)
	if err := regular(lock, -1, dir.owner); err != nil {
		return fmt.Errorf("name index lock: %w", err)
	}
	for {
		err = unix.Flock(lock, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("name index lock: %w", err)
	}
	return f(dir)
}

// lockFile is the index's lock (recordfile.LockFile's name).
const lockFile = ".lock"

// regular checks that fd is a regular file of this user's or owner's, of
// at most limit bytes when limit >= 0.
func regular(fd int, limit int64, owner int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("not a regular file: %w", ErrNotOwn)
	case int(st.Uid) != os.Geteuid() && int(st.Uid) != owner:
		return fmt.Errorf("owned by uid %d, neither %d nor %d: %w", st.Uid, os.Geteuid(), owner, ErrNotOwn)
	case limit >= 0 && st.Size > limit:
		return fmt.Errorf("%d bytes, more than an entry's %d", st.Size, limit)
	}
	return nil
}

// readEntry reads the file name in dir: fs.ErrNotExist when there is
// none.
func readEntry(dir dirFD, name string) ([]byte, error) {
	fd, err := unix.Openat(dir.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, noLink(err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := regular(fd, maxEntry, dir.owner); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, maxEntry+1))
}

// writeEntry replaces the file name in dir with b: written to a fresh
// file of a random name, then renamed over it.
func writeEntry(dir int, name string, b []byte) error {
	var r [8]byte
	rand.Read(r[:])
	tmp := "." + name + "." + hex.EncodeToString(r[:]) + ".tmp"
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
	}
	return err
}

// removeEntry deletes the file name in dir; none is not an error.
func removeEntry(dir int, name string) error {
	if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// noLink adds ErrNotOwn to an O_NOFOLLOW open's ELOOP: a link stands
// where a file of the index should.
func noLink(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("a link (%w): %w", err, ErrNotOwn)
	}
	return err
}

// closeDir closes a directory openDir returned.
func closeDir(dir dirFD) { unix.Close(dir.fd) }
