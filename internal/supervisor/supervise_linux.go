package supervisor

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// supervise runs for the exec's life: it reads output, enforces the deadline
// and the idle deadline, starts the stop protocol when asked, and builds the
// Result once the leader has exited and the output is drained.
func (e *Exec) supervise(stdout, stderr, state *os.File) {
	readers := e.startReaders(stdout, stderr, state)
	ws, stopDone := e.waitLeader()
	stopDone, lateCancel, lateGrace := e.markExited(stopDone)
	e.drainOutput(readers, stdout, stderr, state)
	if stopDone != nil {
		<-stopDone
	}
	e.stdinFeed.Wait()
	r := e.buildResult(ws, readers.stateRecord)
	e.publishResult(r, lateCancel, lateGrace)
}

// streamReaders are the goroutines reading an exec's output and, in a
// session, its state record.
type streamReaders struct {
	wg          sync.WaitGroup
	stateRecord []byte // what the shell reported on state, once wg is done
}

// startReaders starts reading stdout, stderr and, when it is not nil, the
// session's state pipe.
func (e *Exec) startReaders(stdout, stderr, state *os.File) *streamReaders {
	r := &streamReaders{}
	r.wg.Go(func() { e.readStream(stdout, runbox.Stdout) })
	r.wg.Go(func() { e.readStream(stderr, runbox.Stderr) })
	if state != nil {
		r.wg.Go(func() { r.stateRecord = readStateRecord(state) })
	}
	return r
}

// execTimers are an exec's deadline and idle timeout. They are measured on
// the pause clock: while the sandbox is paused they do not advance, and a
// resume re-arms them with exactly what they had left. A nil channel is a
// timer that is not set, or has fired.
type execTimers struct {
	e             *Exec
	clk           *pauseClock
	start         time.Duration // the exec's start on clk
	deadline      <-chan time.Time
	deadlineTimer *time.Timer
	idle          <-chan time.Time
	idleTimer     *time.Timer
}

// newExecTimers sets e's timers, as its spec asks.
func (e *Exec) newExecTimers() *execTimers {
	t := &execTimers{e: e, clk: e.s.pause}
	e.mu.Lock()
	t.start = e.activeStart
	e.mu.Unlock()
	if d := e.spec.Timeout; d > 0 {
		t.deadlineTimer = time.NewTimer(d - (t.clk.now() - t.start))
		t.deadline = t.deadlineTimer.C
	}
	if d := e.spec.IdleTimeout; d > 0 {
		t.idleTimer = time.NewTimer(d - (t.clk.now() - e.out.idleSince()))
		t.idle = t.idleTimer.C
	}
	return t
}

// stop stops the timers.
func (t *execTimers) stop() {
	if t.deadlineTimer != nil {
		t.deadlineTimer.Stop()
	}
	if t.idleTimer != nil {
		t.idleTimer.Stop()
	}
}

// paused reports whether the sandbox is paused.
func (t *execTimers) paused() bool {
	p, _ := t.clk.state()
	return p
}

// deadlineFired stops the exec with stopTimeout once its time is spent; a
// timer that fired early, because a pause moved the deadline, is re-armed
// (by the resume, while paused).
func (t *execTimers) deadlineFired() {
	if t.paused() {
		return // the resume re-arms it
	}
	if left := t.e.spec.Timeout - (t.clk.now() - t.start); left > 0 {
		t.deadlineTimer.Reset(left) // a pause moved it
		return
	}
	t.deadline = nil
	t.e.requestStop(stopTimeout, 0)
}

// idleFired stops the exec with stopIdle once its output has been quiet
// for the idle timeout, and else re-arms the timer for what is left.
func (t *execTimers) idleFired() {
	if t.paused() {
		return
	}
	e := t.e
	if quiet := t.clk.now() - e.out.idleSince(); quiet >= e.spec.IdleTimeout {
		t.idle = nil
		e.requestStop(stopIdle, 0)
	} else {
		t.idleTimer.Reset(e.spec.IdleTimeout - quiet)
	}
}

// resumed re-arms the timers still set with what they have left.
func (t *execTimers) resumed() {
	e := t.e
	if t.deadline != nil {
		t.deadlineTimer.Reset(max(0, e.spec.Timeout-(t.clk.now()-t.start)))
	}
	if t.idle != nil {
		t.idleTimer.Reset(max(0, e.spec.IdleTimeout-(t.clk.now()-e.out.idleSince())))
	}
}

// waitLeader waits for the leader's exit status, meanwhile enforcing the
// deadline and the idle timeout and starting the stop protocol when a stop
// is requested; it returns the status, and a channel closed when the stop
// protocol ends if it was started (nil if not).
func (e *Exec) waitLeader() (unix.WaitStatus, chan struct{}) {
	t := e.newExecTimers()
	defer t.stop()
	_, pauseCh := t.clk.state()
	stopCh := e.stopCh
	var stopDone chan struct{}
	for {
		select {
		case ws := <-e.exitCh:
			return ws, stopDone
		case <-t.deadline:
			t.deadlineFired()
		case <-t.idle:
			t.idleFired()
		case <-pauseCh:
			var paused bool
			paused, pauseCh = t.clk.state()
			if !paused {
				t.resumed()
			}
		case <-stopCh:
			stopCh = nil
			e.mu.Lock()
			grace := e.stopGrace
			e.mu.Unlock()
			stopDone = e.goStopProtocol(grace)
		}
	}
}

// goStopProtocol runs the stop protocol with grace in a goroutine, and
// returns a channel closed when it ends.
func (e *Exec) goStopProtocol(grace time.Duration) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.stopProtocol(grace)
	}()
	return done
}

// markExited records the leader's exit: the exec is exited, and its
// stop reason stands only if the stop protocol began (stopDone not nil).
// When the leader exited by itself and the spec asks, it starts the stop
// protocol for what the leader left running. It returns the stop
// protocol's channel, whether a cancel came too late to stop the leader
// (lateCancel), and the stop grace then.
func (e *Exec) markExited(stopDone chan struct{}) (_ chan struct{}, lateCancel bool, lateGrace time.Duration) {
	e.mu.Lock()
	e.ended = time.Now()
	e.state = runbox.ExecExited
	lateCancel = stopDone == nil && e.reason == stopCancel
	if stopDone == nil {
		// The leader exited by itself before a stop requested at the same
		// moment began: its status stands.
		e.reason = stopNone
	}
	lateGrace = e.stopGrace
	e.mu.Unlock()
	e.cont.leaderReaped()
	close(e.leaderGone)
	if stopDone == nil && e.spec.KillLeftovers {
		// The leader exited by itself: what it left running is stopped
		// now, before the result, so its pipes close and the drain is short.
		stopDone = e.goStopProtocol(e.grace)
	}
	return stopDone, lateCancel, lateGrace
}

// drainOutput reads the output already written, for at most Drain (a
// background child holding a pipe open cannot delay the result longer),
// spills what a live stream has not sent, and closes the exec's stdin and
// pipes.
func (e *Exec) drainOutput(readers *streamReaders, stdout, stderr, state *os.File) {
	drainBy := time.Now().Add(e.s.cfg.Drain)
	e.out.startDrain()
	_ = stdout.SetReadDeadline(drainBy)
	_ = stderr.SetReadDeadline(drainBy)
	if state != nil {
		_ = state.SetReadDeadline(drainBy)
	}
	readers.wg.Wait()
	e.spillUnsent()
	e.dropStdin()
	stdout.Close()
	stderr.Close()
	if state != nil {
		state.Close()
	}
}

// spillUnsent gives a SpillUnsent exec's live stream a moment to send the
// rest; what it has not sent by then (or lost earlier, after the last
// chunk was read) is spilled now.
func (e *Exec) spillUnsent() {
	for i, chunks := range e.out.unsentAtEnd(e.s.cfg.liveCatchUp) {
		if len(chunks) > 0 {
			s := runbox.Stream(i + 1)
			sf := e.s.spills.create(e.spillName(s))
			e.spills[i] = sf
			for _, c := range chunks {
				e.s.spills.write(sf, c.data)
				c.buf.release()
			}
		}
	}
}

// buildResult is the exec's Result from the leader's status ws, its stop
// reason, its session's new state (stateRecord), its output and spills.
func (e *Exec) buildResult(ws unix.WaitStatus, stateRecord []byte) runbox.Result {
	e.mu.Lock()
	r := runbox.Result{ID: e.id, Pid: e.pid, Duration: e.ended.Sub(e.started)}
	switch {
	case ws.Exited():
		r.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		r.ExitCode = 128 + int(ws.Signal())
		r.Signal = strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
	}
	r.TimedOut = e.reason == stopTimeout
	r.IdleTimedOut = e.reason == stopIdle
	r.Cancelled = e.reason == stopCancel || e.reason == stopDisconnect
	stoppedByUs := e.reason != stopNone
	e.mu.Unlock()
	r.OOMKilled = !stoppedByUs && e.oomKilled(ws)
	r.Cwd = e.dir
	if e.session != nil {
		r.CwdFallbackFrom = e.session.fallbackFrom
		r.Cwd = e.session.cwd
		// Only a command that ended by itself changes its session.
		if !stoppedByUs && ws.Exited() {
			if st, err := parseState(stateRecord); err == nil {
				if err := e.s.saveSession(e.session.s, st); err == nil && st.cwd != "" {
					r.Cwd = st.cwd
				}
			}
		}
	}
	e.stopMu.Lock()
	r.Killed = len(e.signalled)
	e.stopMu.Unlock()
	e.out.fill(&r)
	e.finishSpills(&r)
	return r
}

// finishSpills closes the exec's spill files and names them in r; an
// offset means nothing without its file.
func (e *Exec) finishSpills(r *runbox.Result) {
	var truncated [2]bool
	if sf := e.spills[0]; sf != nil {
		r.StdoutSpill, truncated[0] = e.s.spills.finish(sf)
	}
	if sf := e.spills[1]; sf != nil {
		r.StderrSpill, truncated[1] = e.s.spills.finish(sf)
	}
	if r.StdoutSpill == "" {
		r.StdoutSpillOffset = 0
	}
	if r.StderrSpill == "" {
		r.StderrSpillOffset = 0
	}
	r.SpillTruncated = truncated[0] || truncated[1]
}

// publishResult makes r the exec's Result, with what its processes left
// running, and closes Done; a cancel that came too late for the leader
// then stops what it left (lateGrace).
func (e *Exec) publishResult(r runbox.Result, lateCancel bool, lateGrace time.Duration) {
	// Free the containment now unless background processes still run (the
	// sweep frees it once they are gone). One look at what is alive: in proc
	// mode each look is a /proc scan.
	left := e.leftRunning()
	e.mu.Lock()
	r.Survivors = e.survivors
	r.LeftRunning = left
	e.result = r
	if lateCancel {
		e.beginBgStopLocked() // before Done, so WaitStopped waits for it
	}
	e.mu.Unlock()
	// Counted against the budgets before Done: whoever waited for the
	// Result sees the oldest execs already let go.
	e.s.retain(e)
	close(e.done)
	if lateCancel {
		// The cancel still means: nothing this exec started may survive.
		e.stopBackground(lateGrace)
		e.endBgStop()
	}
}
