package endpoint

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/runbox/runbox/internal/daemonauth"
)

// ownDir makes dir (0700) or checks, on the directory it opened without
// following a link, that it is this user's, and makes it 0700 when it is
// looser. Anything in a directory another user owns is theirs to replace:
// the caller neither dials nor writes there (ErrNotOwn).
func ownDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("endpoint directory: %w", err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("endpoint directory %s: %w", dir, err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("endpoint directory %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("endpoint directory %s: owned by uid %d, not %d: %w", dir, st.Uid, os.Geteuid(), ErrNotOwn)
	}
	if st.Mode&0o7777 != 0o700 {
		if err := syscall.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("endpoint directory %s: %w", dir, err)
		}
	}
	return nil
}

// openLog opens path, an endpoint's log in a directory ownDir checked, to
// append to it: never through a link, never a FIFO or device, and only a
// regular file of this user's (one planted while the directory was looser
// is not written to).
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("endpoint log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("endpoint log: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, fmt.Errorf("endpoint log %s: not a regular file of uid %d: %w", path, os.Geteuid(), ErrNotOwn)
	}
	return f, nil
}

// peerIsSelf refuses a connection whose peer (for a dialled socket, the
// process that listens on it) is not of this process's uid, by
// SO_PEERCRED: the caller sends the sandbox's secret on it next, and only
// an endpoint of this user's may carry that.
func peerIsSelf(c net.Conn) error {
	uid, pid, err := daemonauth.PeerCred(c)
	if err != nil {
		return fmt.Errorf("endpoint: %w", err)
	}
	if uid != os.Geteuid() {
		return fmt.Errorf("endpoint: the process listening (pid %d) is uid %d, not %d: %w", pid, uid, os.Geteuid(), ErrNotOwn)
	}
	return nil
}
