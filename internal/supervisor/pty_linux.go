package supervisor

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// ptyEOF is what CloseStdin writes to a pty: the terminal's end-of-file
// character (^D), since closing the master would hang up the terminal.
const ptyEOF = 0x04

// defaultPTYTerm is TERM for a pty exec whose request sets none.
const defaultPTYTerm = "xterm-256color"

// Size of a pty whose request gives zero rows or columns.
const (
	defaultPTYRows = 24
	defaultPTYCols = 80
)

// openPTY opens a pseudo-terminal of the given size (zero dimensions take
// the 24×80 default). The master is returned in non-blocking mode so that
// read deadlines (the drain bound) apply to it; the slave is for the child.
func openPTY(size runbox.PTYSize) (master, slave *os.File, err error) {
	if size.Rows == 0 {
		size.Rows = defaultPTYRows
	}
	if size.Cols == 0 {
		size.Cols = defaultPTYCols
	}
	m, slave, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	// pty.Open's ioctls put m in blocking mode (File.Fd); a non-blocking
	// duplicate goes through the runtime poller instead.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err != nil {
		slave.Close()
		return nil, nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		slave.Close()
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, size); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// setWinsize sets the terminal size of a pty master; the kernel sends
// SIGWINCH to the terminal's foreground process group.
func setWinsize(master *os.File, size runbox.PTYSize) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return err
	}
	return ierr
}

// Resize changes the terminal size of an exec started with a PTY.
func (e *Exec) Resize(rows, cols uint16) error {
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if e.spec.PTY == nil {
		return &runbox.Error{Op: "resize", Exec: e.id, Err: fmt.Errorf("%w: exec has no pty", runbox.ErrInvalidSpec)}
	}
	if e.stdin == nil { // not spawned, or ended
		return &runbox.Error{Op: "resize", Exec: e.id, Err: runbox.ErrNotRunning}
	}
	if err := setWinsize(e.pty, runbox.PTYSize{Rows: rows, Cols: cols}); err != nil {
		return &runbox.Error{Op: "resize", Exec: e.id, Err: err}
	}
	return nil
}

// Resize changes the terminal size of the exec with id, which must have been
// started with a PTY.
func (s *Supervisor) Resize(id string, rows, cols uint16) error {
	e, err := s.Get(id)
	if err != nil {
		return err
	}
	return e.Resize(rows, cols)
}
