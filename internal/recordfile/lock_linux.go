package recordfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockFile is the file in a directory of records that LockDir locks.
const LockFile = ".lock"

// LockDir takes the lock of the directory of records dir (its LockFile),
// waiting while another process holds it, and returns its release. It is
// the one lock that keeps a directory of records consistent across
// processes: a provider's sandbox directory (host, local, ssh), the name
// index.
func LockDir(dir string) (release func(), err error) {
	return Lock(filepath.Join(dir, LockFile))
}

// Lock takes an exclusive lock on the file at path (made 0600 if missing),
// waiting while another process holds it, and returns its release.
func Lock(path string) (release func(), err error) {
	release, _, err = lock(path, syscall.LOCK_EX)
	return release, err
}

// TryLock takes an exclusive lock on the file at path (made 0600 if
// missing) only if no one holds it: held reports that another holder has
// it, and then release is nil. A process that keeps the lock for its
// lifetime (an endpoint serving a socket) is the only one of its kind.
func TryLock(path string) (release func(), held bool, err error) {
	return lock(path, syscall.LOCK_EX|syscall.LOCK_NB)
}

// lock flocks the file at path with how, retrying when a signal interrupts
// the wait.
func lock(path string, how int) (release func(), held bool, err error) {
	// Never through a link (one planted there would make this create or
	// open a file elsewhere), never a FIFO or device; close-on-exec, as Go
	// opens every file.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, false, fmt.Errorf("lock %s: a link: %w", path, ErrNotRegular)
	} else if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false, fmt.Errorf("lock %s: %w", path, ErrNotRegular)
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return nil, true, nil
	}
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, false, nil
}
