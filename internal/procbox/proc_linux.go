package procbox

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"github.com/runbox/runbox/internal/processrecord"
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

// procStartTime returns pid's start time, for the sandbox record.
func procStartTime(pid int) (uint64, error) {
	_, start, err := processrecord.ProcStat(pid)
	return start, err
}

// killPid sends SIGKILL to pid; a process already gone is not an error.
func killPid(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
