package supervisor

import (
	"slices"
	"syscall"
	"time"

	"github.com/runbox/runbox"
)

// requestStop starts the stop protocol unless one was already requested. A
// request after the leader exited stops the exec's background processes
// and leaves its Result alone.
func (e *Exec) requestStop(reason stopReason, grace time.Duration) {
	switch {
	case grace == 0:
		grace = e.grace
	case grace < 0: // runbox.NoGrace
		grace = 0
	}
	e.mu.Lock()
	if e.state == runbox.ExecExited {
		e.mu.Unlock()
		if reason == stopCancel {
			e.stopBackground(grace)
		}
		return
	}
	if e.reason != stopNone {
		e.mu.Unlock()
		return
	}
	e.reason, e.stopGrace = reason, grace
	if e.state == runbox.ExecRunning {
		e.state = runbox.ExecStopping
	}
	close(e.stopCh)
	e.mu.Unlock()
}

func (e *Exec) cancel(grace time.Duration) { e.requestStop(stopCancel, grace) }

// stopBackground stops what an exited exec left running, then frees its
// containment.
func (e *Exec) stopBackground(grace time.Duration) {
	<-e.done
	e.mu.Lock()
	released := e.released
	e.mu.Unlock()
	if released {
		return
	}
	e.stopProtocol(grace)
	e.releaseIfEmpty()
}

// gone reports whether the leader has been reaped and no process is left.
func (e *Exec) gone() bool {
	select {
	case <-e.leaderGone:
		return e.cont.empty()
	default:
		return false
	}
}

// stopProtocol sends SIGTERM to every process of the exec (again to any
// forked since; on a pty, SIGHUP first), waits up to grace for them to
// exit, SIGKILLs what is left (at once when grace is zero),
// and waits until nothing is alive or killConfirmTimeout passes.
func (e *Exec) stopProtocol(grace time.Duration) {
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	// Look often at first, when a tree that obeys SIGTERM is going (most
	// are gone within milliseconds), then back off for one that lingers.
	poll, polls := stopPollInterval, 0
	wait := func() {
		time.Sleep(poll)
		if polls++; polls >= stopFastPolls {
			poll = min(poll*2, 50*time.Millisecond)
		}
	}
	// In cgroup2 mode, processes that left the cgroup are looked for by
	// their markers once the cgroup is done with (the look reads every
	// process's environment).
	over := func() bool { return e.gone() && (e.escapees == nil || e.escapees.empty()) }
	if e.pty != nil && grace > 0 && !over() {
		// A command on a terminal is stopped as a closed terminal stops
		// it: a hangup first (an interactive shell ignores SIGTERM and
		// would otherwise hold on for the whole grace period).
		signalPids(e.livePids(), syscall.SIGHUP, e.signalled)
		e.signalLeaderGroup(syscall.SIGHUP)
	}
	termBy := time.Now().Add(grace)
	for !over() {
		if time.Now().After(termBy) {
			break
		}
		signalPids(e.livePids(), syscall.SIGTERM, e.signalled)
		e.signalLeaderGroup(syscall.SIGTERM)
		wait()
	}
	killBy := time.Now().Add(killConfirmTimeout)
	for !over() && time.Now().Before(killBy) {
		for _, pid := range e.livePids() {
			e.signalled[pid] = struct{}{}
		}
		e.cont.killAll()
		if e.escapees != nil {
			e.escapees.killAll()
		}
		e.signalLeaderGroup(syscall.SIGKILL)
		wait()
	}
	survivors := 0
	if !over() {
		survivors = len(e.livePids())
	}
	e.mu.Lock()
	e.survivors = survivors
	e.mu.Unlock()
}

// livePids lists the exec's live processes: in cgroup2 mode, those in its
// cgroup and those that left it but carry its markers.
func (e *Exec) livePids() []int {
	pids := e.cont.pids()
	if e.escapees == nil {
		return pids
	}
	for _, pid := range e.escapees.pids() {
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// signalLeaderGroup signals the leader's process group while the leader is
// unreaped: in proc mode it reaches a freshly forked child before a /proc
// scan can see it.
func (e *Exec) signalLeaderGroup(sig syscall.Signal) {
	select {
	case <-e.leaderGone:
	default:
		if pid := e.Pid(); pid > 0 {
			_ = syscall.Kill(-pid, sig)
		}
	}
}

// signal sends sig to every live process of the exec.
func (e *Exec) signal(sig syscall.Signal) (int, error) {
	e.mu.Lock()
	released := e.released
	e.mu.Unlock()
	if released || e.cont == nil {
		return 0, &runbox.Error{Op: "signal", Exec: e.id, Err: runbox.ErrNotRunning}
	}
	pids := e.livePids()
	n := signalPids(pids, sig, nil)
	if n == 0 && e.finished() {
		return 0, &runbox.Error{Op: "signal", Exec: e.id, Err: runbox.ErrNotRunning}
	}
	return n, nil
}
