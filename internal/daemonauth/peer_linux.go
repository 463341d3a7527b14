package daemonauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/runbox/runbox"
)

// ErrStrangePeer means the process listening on a runboxd socket is
// neither this user nor root: the secret is not sent to it.
var ErrStrangePeer = errors.New("the socket's listener is another user's")

// OwnListener returns dial, a dialer of a unix socket on this machine,
// keeping only connections whose listener (SO_PEERCRED: the process that
// called listen) is of this process's effective uid or root, the only
// users who may hold a sandbox's secret. Paths are where the records say,
// and a record's directory may be renamed under the caller by whoever
// owns a directory above it: checking who listens, on the connection
// itself, holds whatever the path led to.
func OwnListener(dial runbox.Dialer) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		if err := checkListener(c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// checkListener refuses c unless its peer is of this effective uid or
// root.
func checkListener(c net.Conn) error {
	uid, pid, err := PeerCred(c)
	if err != nil {
		return fmt.Errorf("runboxd socket: %w", err)
	}
	if uid != 0 && uid != os.Geteuid() {
		return fmt.Errorf("runboxd socket: the listener (pid %d) is uid %d, neither %d nor root: %w", pid, uid, os.Geteuid(), ErrStrangePeer)
	}
	return nil
}

// PeerCred returns the uid and pid of c's peer (SO_PEERCRED): for a
// dialled unix socket the process that listens, for an accepted one the
// process that connected.
func PeerCred(c net.Conn) (uid, pid int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, 0, fmt.Errorf("%T has no descriptor to ask who its peer is: %w", c, ErrStrangePeer)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}
