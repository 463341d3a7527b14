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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("runboxd socket: %T has no descriptor to ask who listens: %w", c, ErrStrangePeer)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("runboxd socket: %w", err)
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("runboxd socket: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("runboxd socket: SO_PEERCRED: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("runboxd socket: the listener (pid %d) is uid %d, neither %d nor root: %w", cred.Pid, cred.Uid, os.Geteuid(), ErrStrangePeer)
	}
	return nil
}
