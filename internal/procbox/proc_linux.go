package procbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Detached is a runboxd started by this process.
type Detached struct {
	Pid int
	// Exited is closed once the process has exited and been reaped.
	Exited chan struct{}
	proc   *os.Process
}

// Kill sends SIGKILL; it is safe after the process exited.
func (d *Detached) Kill() { d.proc.Signal(syscall.SIGKILL) }

// SpawnDetached starts bin in a new session (so it has its own process group
// and no controlling terminal, and a Ctrl-C aimed at the caller never reaches
// it), with stdin from /dev/null and stdout and stderr to log. The sandbox
// outlives the caller: no parent-death signal, no context.
//
// A goroutine waits for the process, so that while the caller lives a dead
// runboxd is reaped rather than left a zombie that looks alive.
func SpawnDetached(bin string, args []string, dir string, log *os.File) (*Detached, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return StartDetached(cmd)
}

// StartDetached starts cmd, prepared by the caller to outlive it (a new
// session at least), and reaps it when it exits.
func StartDetached(cmd *exec.Cmd) (*Detached, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Detached{Pid: cmd.Process.Pid, Exited: make(chan struct{}), proc: cmd.Process}
	go func() {
		cmd.Wait()
		close(d.Exited)
	}()
	return d, nil
}

// procStat returns the state (field 3) and start time (field 22, clock ticks
// after boot) of pid from /proc/<pid>/stat.
func procStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may itself contain
	// spaces and parentheses: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return f[0][0], start, nil
}

// procStartTime returns pid's start time, for the sandbox record.
func procStartTime(pid int) (uint64, error) {
	_, start, err := procStat(pid)
	return start, err
}

// sameProcess reports whether pid is alive (not a zombie) and started at
// start.
func sameProcess(pid int, start uint64) bool {
	state, s, err := procStat(pid)
	if err != nil {
		return false
	}
	return s == start && state != 'Z' && state != 'X' && state != 'x'
}

// bootID returns the kernel's boot id, or "" when it cannot be read.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// killPid sends SIGKILL to pid; a process already gone is not an error.
func killPid(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// lockHome takes an exclusive lock on dir/.lock and returns its release. It
// serialises Creates across processes so names stay unique.
func lockHome(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock runbox home: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock runbox home: %w", err)
	}
	return func() { f.Close() }, nil
}
