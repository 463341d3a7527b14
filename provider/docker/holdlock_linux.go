package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lockPoll is how often a lock that is taken is tried again.
const lockPoll = 5 * time.Millisecond

// fileLock is a held flock; unlock releases it (a nil one is no lock).
type fileLock struct{ f *os.File }

// lockFile takes the flock of file name in dir (shared or exclusive),
// waiting for it until ctx ends. An empty dir (a sandbox with no state
// directory: the exec stream) gives no lock.
func lockFile(ctx context.Context, dir, name string, exclusive bool) (*fileLock, error) {
	if dir == "" {
		return nil, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}

// unlock releases l (closing its descriptor drops the flock); once
// released, it does nothing.
func (l *fileLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
