package seccomp

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AuditArch is the architecture the filters accept (every other kills the
// process): a notification under another cannot reach a listener.
const AuditArch = auditArch

// Listener is the user-notification descriptor of a filter loaded with
// SECCOMP_FILTER_FLAG_NEW_LISTENER: a call the filter notifies waits in
// the kernel until the listener answers for it (Respond), or until the
// listener is closed (the call then fails with ENOSYS).
//
// One goroutine receives; Shutdown may be called from any other.
type Listener struct {
	fd       int
	wakeOnce sync.Once
	wake     int // an eventfd that Shutdown signals, made on first use
	wakeErr  error
	closed   sync.Once
}

// Notification is one call a filter handed to its listener.
type Notification struct {
	// ID names the notification to Respond and Valid.
	ID uint64
	// PID is the calling thread's id (a thread id, in the pid namespace
	// of the receiving process).
	PID int
	// Nr, Arch and Args are the call as the filter saw it.
	Nr   int
	Arch uint32
	Args [6]uint64
}

// seccompNotif and seccompNotifResp are struct seccomp_notif and struct
// seccomp_notif_resp.
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompNotifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// ErrShutdown is what Receive returns once Shutdown was called.
var ErrShutdown = errors.New("seccomp: listener shut down")

func (l *Listener) wakeFD() (int, error) {
	l.wakeOnce.Do(func() {
		l.wake, l.wakeErr = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if l.wakeErr != nil {
			l.wakeErr = fmt.Errorf("seccomp: listener eventfd: %w", l.wakeErr)
		}
	})
	return l.wake, l.wakeErr
}

// Receive waits for the next notification. It returns ErrShutdown after
// Shutdown, and io.EOF once no thread uses the filter any more (nothing
// can be notified again).
func (l *Listener) Receive() (Notification, error) {
	wake, err := l.wakeFD()
	if err != nil {
		return Notification{}, err
	}
	for {
		fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return Notification{}, fmt.Errorf("seccomp: poll listener: %w", err)
		}
		if fds[1].Revents != 0 {
			return Notification{}, ErrShutdown
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return Notification{}, io.EOF
			}
			continue
		}
		var n seccompNotif // the kernel wants it zeroed
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n)))
		switch errno {
		case 0:
			return Notification{ID: n.id, PID: int(n.pid), Nr: int(n.nr), Arch: n.arch, Args: n.args}, nil
		case unix.EINTR, unix.ENOENT:
			// ENOENT: the caller was interrupted or killed after the
			// poll said a notification was there.
			continue
		default:
			return Notification{}, fmt.Errorf("seccomp: receive notification: %w", errno)
		}
	}
}

// Valid reports whether notification id still waits for an answer: its
// caller has not been killed or interrupted since. Whatever was read of
// the caller (its memory, its /proc entries) before a Valid that returns
// true was read of that very thread, not of a successor with its id.
func (l *Listener) Valid(id uint64) bool {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id)))
	return errno == 0
}

// Respond answers notification id: the call returns 0, or fails with
// errno when it is not 0. The call never runs in the kernel (no
// SECCOMP_USER_NOTIF_FLAG_CONTINUE). An answer to a caller gone in the
// meantime returns an error wrapping ENOENT.
func (l *Listener) Respond(id uint64, errno unix.Errno) error {
	r := seccompNotifResp{id: id, error: -int32(errno)}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(l.fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&r)))
	if e != 0 {
		return fmt.Errorf("seccomp: answer notification: %w", e)
	}
	return nil
}

// Shutdown makes a Receive under way, and every later one, return
// ErrShutdown.
func (l *Listener) Shutdown() {
	wake, err := l.wakeFD()
	if err != nil {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(wake, one[:])
}

// Close releases the listener; calls waiting on it fail with ENOSYS. Call
// it once no goroutine uses the listener any more.
func (l *Listener) Close() error {
	var err error
	l.closed.Do(func() {
		err = unix.Close(l.fd)
		if l.wakeErr == nil && l.wake > 0 {
			unix.Close(l.wake)
		}
	})
	return err
}
