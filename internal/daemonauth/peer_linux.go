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
// called listen) is one of the users who may hold a sandbox's secret: this
// process's effective uid, root, or the owner of the runbox home (the
// socket's record's) when that owner alone may add entries to it (root
// using a user's home). Paths are where the records say, and a record's
// directory may be renamed under the caller by whoever owns a directory
// above it: checking who listens, on the connection itself, holds
// whatever the path led to.
func OwnListener(dial runbox.Dialer, home string) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		if err := checkListener(c, home); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

// checkListener refuses c unless its peer is of this effective uid, root,
// or the owner of home when that owner alone may write in it.
func checkListener(c net.Conn, home string) error {
	uid, pid, err := PeerCred(c)
	if err != nil {
		return fmt.Errorf("runboxd socket: %w", err)
	}
	if uid != 0 && uid != os.Geteuid() && !ownedAlone(home, uid) {
		return fmt.Errorf("runboxd socket: the listener (pid %d) is uid %d, neither %d, root nor the owner of %s: %w", pid, uid, os.Geteuid(), home, ErrStrangePeer)
	}
	return nil
}

// ownedAlone reports whether dir belongs to uid and no one else may add
// entries to it.
func ownedAlone(dir string, uid int) bool {
	var st syscall.Stat_t
	if dir == "" || syscall.Stat(dir, &st) != nil {
		return false
	}
	return int(st.Uid) == uid && st.Mode&0o022 == 0
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
