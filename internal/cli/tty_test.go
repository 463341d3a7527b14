package cli_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/cli"
)

func TestExecTTY(t *testing.T) {
	setHome(t)
	id := up(t)
	o := rb(t, "exec", "-t", id, "--", "test -t 1 && echo tty")
	if o.code != 0 || o.stdout != "tty\r\n" || o.stderr != "" {
		t.Errorf("exec -t: %+v; want exit 0 and %q", o, "tty\r\n")
	}
	// Not a terminal here, so the PTY gets the default size.
	o = rb(t, "exec", "-t", id, "--", "stty size")
	if o.code != 0 || o.stdout != "24 80\r\n" {
		t.Errorf("exec -t stty size: %+v; want 24 80", o)
	}
	o = runboxStdin(t, "hello\n", "exec", "-t", "-i", id, "--", "read x && echo got-$x")
	if o.code != 0 || !strings.Contains(o.stdout, "got-hello\r\n") {
		t.Errorf("exec -t -i: %+v; want got-hello", o)
	}
}

func TestSh(t *testing.T) {
	setHome(t)
	id := up(t)
	o := runboxStdin(t, "echo hi\necho $((6*7))\nexit\n", "sh", id)
	if o.code != 0 || !strings.Contains(o.stdout, "hi") || !strings.Contains(o.stdout, "42\r\n") {
		t.Errorf("sh: %+v; want exit 0 with hi and 42", o)
	}
	o = runboxStdin(t, "exit 7\n", "sh", id)
	if o.code != 7 {
		t.Errorf("sh exit 7: %+v", o)
	}
}

// TestShOnTerminal drives runbox sh through a pseudo-terminal, as a person
// would: the shell gets this terminal's size and its resizes, and the
// terminal leaves raw mode when the shell exits.
func TestShOnTerminal(t *testing.T) {
	setHome(t)
	id := up(t)
	master, slave := openTestPTY(t)
	defer slave.Close()
	defer master.Close() // hangs up the slave: the stdin pump's read returns
	if err := setTestSize(master, 30, 100); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	waitFor := func(s string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			ok := strings.Contains(out.String(), s)
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no %q in terminal output %q", s, out.String())
			}
		}
	}
	codeCh := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		codeCh <- cli.Main(ctx, cli.ServerCommands{}, []string{"sh", id}, slave, slave, &stderr)
	}()
	master.WriteString("stty size\n")
	waitFor("30 100")
	if err := setTestSize(master, 40, 120); err != nil {
		t.Fatal(err)
	}
	// The slave is not this process's controlling terminal, so the kernel
	// does not send the SIGWINCH a real terminal would.
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatalf("SIGWINCH: %v", err)
	}
	// The resize reaches the sandbox asynchronously: ask for the size until
	// the new one shows (a deadline, not a sleep, decides when to give up).
	for deadline := time.Now().Add(30 * time.Second); ; {
		master.WriteString("stty size\n")
		if seen(out.String, "40 120", 500*time.Millisecond, &mu) {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the shell never saw the new size 40 120: terminal output %q", out.String())
		}
	}
	master.WriteString("exit 3\n")
	select {
	case code := <-codeCh:
		if code != 3 {
			t.Errorf("sh exit 3: exit status %d, stderr %q", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sh did not exit")
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("terminal not restored: before %+v, after %+v", before, after)
	}
}

// seen polls text (read under mu) for want for up to d.
func seen(text func() string, want string, d time.Duration, mu *sync.Mutex) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		ok := strings.Contains(text(), want)
		mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// openTestPTY opens a pseudo-terminal whose master is non-blocking, so that
// closing it ends a pending Read (pty.Open's ioctls leave it blocking).
func openTestPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		slave.Close()
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), slave
}

// setTestSize sets a terminal's size without putting the master in blocking
// mode.
func setTestSize(master *os.File, rows, cols uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}
