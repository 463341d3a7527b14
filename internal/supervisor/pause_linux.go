package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// freezeWait bounds how long Pause waits for the kernel to report an exec's
// cgroup frozen (cgroup.events "frozen 1"); a task in an uninterruptible
// sleep freezes when it wakes.
const freezeWait = 2 * time.Second

// Pause is the user's pause: it freezes every process of every exec and
// stops the pause clock, so deadlines and idle timeouts stop counting. The
// daemon itself keeps running and answering (Info says Paused); Start of a
// new exec is refused with runbox.ErrSandboxPaused until Resume. Where an
// exec has its own cgroup it is frozen with cgroup.freeze, which its
// processes cannot see; in proc mode its processes get SIGSTOP, scan after
// scan until no new one appears. Pausing a paused sandbox does nothing; a
// sandbox held frozen (Hold) is already frozen, and stays so after the
// last hold ends, until Resume.
func (s *Supervisor) Pause() error {
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("pause: %w: daemon is shutting down", runbox.ErrSandboxLost)
	}
	s.userPaused = true
	s.mu.Unlock()
	if err := s.applyFreezeLocked(); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	return nil
}

// Resume lifts the user's pause: when no hold stands it thaws what Pause
// froze and restarts the pause clock, so each exec's deadline and idle
// timeout continue with the time they had left; while a hold stands the
// sandbox stays frozen until the last hold ends. Resuming a sandbox that
// is not paused does nothing.
func (s *Supervisor) Resume() error {
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	s.mu.Lock()
	s.userPaused = false
	s.mu.Unlock()
	if err := s.applyFreezeLocked(); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// Hold freezes the sandbox as Pause does, for its caller's own purpose
// (a snapshot's copy), and keeps it frozen until release is called: the
// sandbox is frozen while the user's pause stands or any hold does, and
// neither Pause nor Resume changes a hold. release is idempotent and
// returns the thaw's error when it was the last reason to stay frozen.
// The daemon ties each hold to a stream, so a holder that dies releases
// its hold with its connection. A hold whose freeze fails is released at
// once and the error returned: the caller cannot count on a frozen
// sandbox.
func (s *Supervisor) Hold() (release func() error, err error) {
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("hold: %w: daemon is shutting down", runbox.ErrSandboxLost)
	}
	s.holds++
	s.mu.Unlock()
	unhold := func() error {
		s.mu.Lock()
		s.holds--
		s.mu.Unlock()
		return s.applyFreezeLocked()
	}
	if err := s.applyFreezeLocked(); err != nil {
		return nil, fmt.Errorf("hold: %w", errors.Join(err, unhold()))
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			s.freezeMu.Lock()
			defer s.freezeMu.Unlock()
			if err = unhold(); err != nil {
				err = fmt.Errorf("release hold: %w", err)
			}
		})
		return err
	}, nil
}

// applyFreezeLocked freezes or thaws the sandbox to match the user's
// pause and the holds (frozen while either stands; never again once
// Shutdown thawed it). s.freezeMu is held. Freezing stops the pause clock
// first, so a spawn under way sees it and freezes its own leader; thawing
// restarts it last, so no deadline fires against a process that has not
// had its time back.
func (s *Supervisor) applyFreezeLocked() error {
	s.mu.Lock()
	want := !s.thawedDown && (s.userPaused || s.holds > 0)
	if frozen, _ := s.pause.state(); frozen == want {
		s.mu.Unlock()
		return nil
	}
	if want {
		s.pause.set(true)
	}
	execs := s.execsLocked()
	s.mu.Unlock()
	// A spawn under way finishes first: it then sees the clock paused
	// and freezes its own leader, or this finds it among the leaders.
	s.spawnMu.Lock()
	defer s.spawnMu.Unlock()
	var errs []error
	for _, e := range execs {
		if err := e.cont.freeze(want); err != nil {
			errs = append(errs, fmt.Errorf("exec %s: %w", e.id, err))
		}
	}
	if s.cgroups == nil {
		sig := syscall.SIGCONT
		if want {
			sig = syscall.SIGSTOP
		}
		s.leadersMu.Lock()
		for pid := range s.leaders {
			_ = syscall.Kill(pid, sig)
		}
		s.leadersMu.Unlock()
	}
	if !want {
		s.mu.Lock()
		s.pause.set(false)
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// thawForShutdown thaws the sandbox for good, whatever pause or holds
// stand: a stopping daemon's commands must take the stop protocol's
// SIGTERM. Holds released later change nothing.
func (s *Supervisor) thawForShutdown() {
	s.freezeMu.Lock()
	defer s.freezeMu.Unlock()
	s.mu.Lock()
	s.thawedDown = true
	s.mu.Unlock()
	_ = s.applyFreezeLocked()
}

// Paused reports whether the user's pause stands (Pause, until Resume).
// The sandbox may be frozen without it, by a hold (see Holds and Frozen).
func (s *Supervisor) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.userPaused
}

// Holds counts the holds that stand (Hold, until released).
func (s *Supervisor) Holds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds
}

// Frozen reports whether the sandbox's commands are frozen now, for the
// user's pause or a hold.
func (s *Supervisor) Frozen() bool {
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

// pausedError is the refusal of a new exec while the sandbox is frozen:
// by its user's pause (user), or only by holds, which end by themselves
// (a snapshot's copy), so the caller is told to retry, not to resume.
func pausedError(id string, user bool, holds int) error {
	if !user && holds > 0 {
		return &runbox.Error{Op: "start", Exec: id, Err: fmt.Errorf("%w: held frozen by %d snapshot(s) or other hold(s) until they end: retry then", runbox.ErrSandboxPaused, holds)}
	}
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
