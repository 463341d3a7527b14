package supervisor

import (
	"context"
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
		if reason == stopCancel {
			// The stop runs on its own: a cancel returns at once, and
			// WaitStopped waits for it.
			e.beginBgStopLocked()
			go func() {
				defer e.endBgStop()
				e.stopBackground(grace)
			}()
		}
		e.mu.Unlock()
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

// closedChan is a channel that is always closed.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// beginBgStopLocked counts a stop of what the exited exec left running,
// which endBgStop ends. e.mu is held.
func (e *Exec) beginBgStopLocked() {
	if e.bgStops == 0 {
		e.bgIdle = make(chan struct{})
	}
	e.bgStops++
}

func (e *Exec) endBgStop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bgStops--; e.bgStops == 0 {
		close(e.bgIdle)
	}
}

// WaitStopped waits until the exec is done and no stop of what it left
// running (a Cancel after it ended) is still in progress, or ctx ends.
// Call it after Cancel to know that the stop has finished.
func (e *Exec) WaitStopped(ctx context.Context) error {
	select {
	case <-e.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	idle := closedChan
	if e.bgStops > 0 {
		idle = e.bgIdle
	}
	e.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

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
//
// In cgroup2 mode each look reads the cgroup's member list, which is cheap,
// and a wait between looks ends as the cgroup empties (see cgroupEvents).
// The search for processes that left the cgroup (escapees) reads every
// process's /proc entry, which costs in proportion to the machine's
// process count: it runs from the second look of each phase on, at most
// every escapeeRescanInterval while the cgroup is populated, and once the
// cgroup is empty and the leader reaped, to confirm that nothing is left
// (a tree that obeys SIGTERM at once needs that one search only).
func (e *Exec) stopProtocol(grace time.Duration) {
	e.stopMu.Lock()
	defer e.stopMu.Unlock()
	w := e.newStopWait()
	defer w.close()
	// A command on a terminal is stopped as a closed terminal stops it: a
	// hangup first (an interactive shell ignores SIGTERM and would
	// otherwise hold on for the whole grace period), to every process,
	// and again to the leader's group while the grace lasts (see
	// firstHangupRepeat).
	hangup := e.pty != nil && grace > 0 && !e.gone()
	if hangup {
		signalPids(e.livePids(), syscall.SIGHUP, e.signalled)
		e.signalLeaderGroup(syscall.SIGHUP)
	}
	s := &stopSearch{e: e}
	done := e.termPhase(w, s, grace, hangup)
	w.restart()
	if !done {
		done = e.killPhase(w, s)
	}
	survivors := 0
	if !done {
		survivors = len(e.livePids())
	}
	e.mu.Lock()
	e.survivors = survivors
	e.mu.Unlock()
}

// stopSearch looks for the exec's processes by their markers (cgroup2
// mode; proc mode's containment is that search itself) during a stop: the
// look that finds escapees from the cgroup, which costs in proportion to
// the machine's process count.
type stopSearch struct {
	e    *Exec
	last time.Time // when it last searched
}

// find returns what a search finds at a phase's look (-1: the confirming
// search), or nil when it does not search: it searches always once the
// cgroup is empty and the leader reaped, else from a phase's second look
// on, every escapeeRescanInterval.
func (s *stopSearch) find(look int) []int {
	e := s.e
	if e.escapees == nil || (!e.gone() && (look == 0 || time.Since(s.last) < escapeeRescanInterval)) {
		return nil
	}
	s.last = time.Now()
	return e.escapees.pidsWith(e.cont.pids)
}

// over reports whether nothing of the exec is left; left is what its
// confirming search found (escapees, the cgroup being empty).
func (s *stopSearch) over() (done bool, left []int) {
	if !s.e.gone() {
		return false, nil
	}
	left = s.find(-1)
	return len(left) == 0, left
}

// termPhase is the stop's first phase: it sends SIGTERM to every process
// of the exec, and to any forked since, at each look until nothing is left
// (which it reports) or grace has passed, repeating the hangup to the
// leader's group, backing off, when hangup says a terminal's was sent.
func (e *Exec) termPhase(w *stopWait, s *stopSearch, grace time.Duration, hangup bool) (done bool) {
	hangupRepeat := firstHangupRepeat
	nextHangup := time.Now().Add(hangupRepeat)
	termBy := time.Now().Add(grace)
	for look := 0; ; look++ {
		var left []int
		if done, left = s.over(); done || time.Now().After(termBy) {
			return done
		}
		// The leader's group first: one system call reaches most trees
		// whole, where signalling pid by pid on two cores is overtaken by
		// the processes it wakes. Then each process of the exec by pid (a
		// process in the group gets a second SIGTERM there). Every member
		// listed before the group signal was signalled, even if it is gone
		// by the time its pid's turn comes.
		if hangup && time.Now().After(nextHangup) {
			e.signalLeaderGroup(syscall.SIGHUP)
			hangupRepeat *= 2
			nextHangup = time.Now().Add(hangupRepeat)
		}
		members := e.cont.pids()
		e.signalLeaderGroup(syscall.SIGTERM)
		signalPids(members, syscall.SIGTERM, e.signalled)
		for _, pid := range members {
			e.signalled[pid] = struct{}{}
		}
		if left == nil {
			left = s.find(look)
		}
		signalPids(left, syscall.SIGTERM, e.signalled)
		w.wait(termBy)
	}
}

// killPhase is the stop's second phase: it SIGKILLs what is left of the exec at
// each look until nothing is (which it reports) or killConfirmTimeout has
// passed.
func (e *Exec) killPhase(w *stopWait, s *stopSearch) (done bool) {
	killBy := time.Now().Add(killConfirmTimeout)
	for look := 0; ; look++ {
		var left []int
		if done, left = s.over(); done || time.Now().After(killBy) {
			return done
		}
		members := e.cont.pids()
		for _, pid := range members {
			e.signalled[pid] = struct{}{}
		}
		e.cont.killAll()
		e.signalLeaderGroup(syscall.SIGKILL)
		if left == nil {
			left = s.find(look)
		}
		for _, pid := range left {
			e.signalled[pid] = struct{}{}
		}
		if outside(left, members) {
			// Nothing kills processes outside the cgroup all at once: the
			// tracker stops them first, then kills them (a fork bomb
			// cannot outpace it).
			e.escapees.killAll()
		}
		w.wait(killBy)
	}
}

// outside reports whether some of pids are not among members.
func outside(pids, members []int) bool {
	for _, pid := range pids {
		if !slices.Contains(members, pid) {
			return true
		}
	}
	return false
}

// stopWait spaces the stop protocol's looks at what is alive: often at
// first, when a tree that obeys SIGTERM is going (most are gone within
// milliseconds), then backing off for one that lingers, but never past the
// end of the grace. In cgroup2 mode a wait ends as soon as the cgroup is
// empty and the leader reaped.
type stopWait struct {
	e      *Exec
	events *cgroupEvents // nil in proc mode (or when cgroup.events cannot be opened)
	poll   time.Duration
	polls  int
}

func (e *Exec) newStopWait() *stopWait {
	w := &stopWait{e: e, poll: stopPollInterval}
	if c, ok := e.cont.(*cgroupExec); ok {
		w.events, _ = c.openEvents()
	}
	return w
}

// restart looks often again, for a new phase.
func (w *stopWait) restart() { w.poll, w.polls = stopPollInterval, 0 }

func (w *stopWait) close() {
	if w.events != nil {
		w.events.close()
	}
}

// wait waits for the next look, which is never later than until (the end
// of the phase: a wait that overshot the grace would prolong the stop).
func (w *stopWait) wait(until time.Time) {
	d := min(w.poll, max(time.Until(until), 0))
	if w.polls++; w.polls >= stopFastPolls {
		w.poll = min(w.poll*2, 50*time.Millisecond)
	}
	if w.events == nil {
		time.Sleep(d)
		return
	}
	deadline := time.Now().Add(d)
	if !w.events.waitEmpty(d) {
		return
	}
	// The cgroup is empty, so the leader has exited: wait for the reaper.
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-w.e.leaderGone:
	case <-t.C:
	}
}

// livePids lists the exec's live processes: in cgroup2 mode, those in its
// cgroup and those that left it but carry its markers.
func (e *Exec) livePids() []int {
	if e.escapees == nil {
		return e.cont.pids()
	}
	return e.escapees.pidsWith(e.cont.pids)
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
	if released {
		return 0, &runbox.Error{Op: "signal", Exec: e.id, Err: runbox.ErrNotRunning}
	}
	pids := e.livePids()
	n := signalPids(pids, sig, nil)
	if n == 0 && e.finished() {
		return 0, &runbox.Error{Op: "signal", Exec: e.id, Err: runbox.ErrNotRunning}
	}
	return n, nil
}
