package sandboxnames

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// locked runs f holding the index's lock, creating the directory first.
func (x Index) locked(f func() error) error {
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		return fmt.Errorf("name index: %w", err)
	}
	l, err := os.OpenFile(filepath.Join(x.dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("name index: %w", err)
	}
	defer l.Close() // releases the lock
	for {
		err = syscall.Flock(int(l.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("name index: lock: %w", err)
	}
	return f()
}
