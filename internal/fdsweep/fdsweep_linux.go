package fdsweep

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInherited closes every descriptor numbered keep or above that is not
// close-on-exec (at process start: every one the parent leaked), and marks
// whatever else is at or above keep close-on-exec, so that none of them
// reaches a process started from here. Descriptors below keep are the ones
// the process was given on purpose (stdio, and a launcher's documented
// ones). Call it first thing in main, before anything opens a descriptor
// it means to pass on.
func CloseInherited(keep int) error {
	fds, err := openFDs()
	if err == nil {
		for _, fd := range fds {
			if fd < keep {
				continue
			}
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err == nil && flags&unix.FD_CLOEXEC == 0 {
				unix.Close(fd)
			}
		}
	}
	// Whatever /proc did not show (it may be missing), or a descriptor
	// the runtime opened in between: close-on-exec at the least.
	if cerr := CloexecFrom(keep); cerr != nil {
		return errors.Join(err, cerr)
	}
	return nil
}

// CloexecFrom marks every descriptor numbered first or above close-on-exec
// (close_range(2) with CLOSE_RANGE_CLOEXEC, or one by one through /proc on a
// kernel older than 5.11).
func CloexecFrom(first int) error {
	err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("fdsweep: close_range from %d: %w", first, err)
	}
	fds, perr := openFDs()
	if perr != nil {
		return fmt.Errorf("fdsweep: close_range from %d: %w; and %w", first, err, perr)
	}
	for _, fd := range fds {
		if fd >= first {
			unix.CloseOnExec(fd)
		}
	}
	return nil
}

// openFDs lists the process's open descriptors. The directory's own
// descriptor is among them; it is closed before this returns, so acting on
// it does nothing.
func openFDs() ([]int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("fdsweep: list descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("fdsweep: list descriptors: %w", err)
	}
	fds := make([]int, 0, len(names))
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}
