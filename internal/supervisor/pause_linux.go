package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// freezeWait bounds how long Pause waits for the kernel to report an exec's
// cgroup frozen (cgroup.events "frozen 1"); a task in an uninterruptible
// sleep freezes when it wakes.
const freezeWait = 2 * time.Second

// Pause freezes every process of every exec and stops the pause clock, so
// deadlines and idle timeouts stop counting. The daemon itself keeps
// running and answering (Info says Paused); Start of a new exec is refused
// with runbox.ErrSandboxPaused until Resume. Where an exec has its own
// cgroup it is frozen with cgroup.freeze, which its processes cannot see;
// in proc mode its processes get SIGSTOP, scan after scan until no new one
// appears. Pausing a paused sandbox does nothing.
func (s *Supervisor) Pause() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("pause: %w: daemon is shutting down", runbox.ErrSandboxLost)
	}
	if !s.pause.set(true) {
		s.mu.Unlock()
		return nil
	}
	execs := s.execsLocked()
	s.mu.Unlock()
	// A spawn under way finishes first: it then sees the clock paused
	// and freezes its own leader, or Pause finds it among the leaders.
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	var errs []error
	for _, e := range execs {
		if err := e.cont.freeze(true); err != nil {
			errs = append(errs, fmt.Errorf("exec %s: %w", e.id, err))
		}
	}
	if s.cgroups == nil {
		s.leadersMu.Lock()
		for pid := range s.leaders {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		s.leadersMu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// Resume thaws what Pause froze and restarts the pause clock: each exec's
// deadline and idle timeout continue with the time they had left. Resuming
// a sandbox that is not paused does nothing.
func (s *Supervisor) Resume() error {
	s.mu.Lock()
	if paused, _ := s.pause.state(); !paused {
		s.mu.Unlock()
		return nil
	}
	execs := s.execsLocked()
	s.mu.Unlock()
	s.spawnMu.Lock()
	var errs []error
	for _, e := range execs {
		if err := e.cont.freeze(false); err != nil {
			errs = append(errs, fmt.Errorf("exec %s: %w", e.id, err))
		}
	}
	if s.cgroups == nil {
		s.leadersMu.Lock()
		for pid := range s.leaders {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		s.leadersMu.Unlock()
	}
	// The clock runs again only once the processes do, so no deadline
	// fires against a process that has not had its time back.
	s.mu.Lock()
	s.pause.set(false)
	s.mu.Unlock()
	s.spawnMu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// Paused reports whether the sandbox is paused.
func (s *Supervisor) Paused() bool {
	p, _ := s.pause.state()
	return p
}

// execsLocked lists the supervisor's execs; s.mu is held.
func (s *Supervisor) execsLocked() []*Exec {
	out := make([]*Exec, 0, len(s.execs))
	for _, e := range s.execs {
		out = append(out, e)
	}
	return out
}

// pausedError is the refusal of a new exec while the sandbox is paused.
func pausedError(id string) error {
	return &runbox.Error{Op: "start", Exec: id, Err: fmt.Errorf("%w: resume it first (runbox resume)", runbox.ErrSandboxPaused)}
}

// freeze freezes (or thaws) the exec's cgroup through cgroup.freeze and, when
// freezing, waits until the kernel reports it frozen. A cgroup once frozen
// is never reused by a later exec.
func (c *cgroupExec) freeze(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		return nil
	}
	v := []byte("0")
	if on {
		v = []byte("1")
		c.frozen = true
	}
	fd, err := unix.Openat(c.fd, "cgroup.freeze", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup.freeze: %w", err)
	}
	_, err = unix.Write(fd, v)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("cgroup.freeze: %w", err)
	}
	if !on {
		return nil
	}
	for deadline := time.Now().Add(freezeWait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		data, err := readAt(c.fd, "cgroup.events")
		if err != nil || strings.Contains(string(data), "frozen 1") {
			return nil
		}
	}
	return fmt.Errorf("cgroup %s not frozen after %v", c.name, freezeWait)
}

// freeze stops (SIGSTOP) or continues (SIGCONT) the exec's processes. A
// stopped process cannot fork, so scans that stop every process they find
// run out of new ones; two quiet scans in a row end it.
func (p *procTracker) freeze(on bool) error {
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	p.signalUntilQuiet(sig)
	return nil
}
