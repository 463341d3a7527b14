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
	var readers sync.WaitGroup
	readers.Go(func() { e.readStream(stdout, runbox.Stdout) })
	readers.Go(func() { e.readStream(stderr, runbox.Stderr) })
	var stateRecord []byte
	if state != nil {
		readers.Go(func() { stateRecord = readStateRecord(state) })
	}

	// The deadline and the idle timeout are measured on the pause clock:
	// while the sandbox is paused they do not advance, and a resume
	// re-arms them with exactly what they had left.
	clk := e.s.pause
	e.mu.Lock()
	start := e.activeStart
	e.mu.Unlock()
	var deadline <-chan time.Time
	var deadlineTimer *time.Timer
	if t := e.spec.Timeout; t > 0 {
		deadlineTimer = time.NewTimer(t - (clk.now() - start))
		defer deadlineTimer.Stop()
		deadline = deadlineTimer.C
	}
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if t := e.spec.IdleTimeout; t > 0 {
		idleTimer = time.NewTimer(t - (clk.now() - e.out.idleSince()))
		defer idleTimer.Stop()
		idle = idleTimer.C
	}
	_, pauseCh := clk.state()
	isPaused := func() bool { p, _ := clk.state(); return p }

	stopCh := e.stopCh
	var stopDone chan struct{}
	var ws unix.WaitStatus
	for waiting := true; waiting; {
		select {
		case ws = <-e.exitCh:
			waiting = false
		case <-deadline:
			if isPaused() {
				continue // the resume re-arms it
			}
			if left := e.spec.Timeout - (clk.now() - start); left > 0 {
				deadlineTimer.Reset(left) // a pause moved it
				continue
			}
			deadline = nil
			e.requestStop(stopTimeout, 0)
		case <-idle:
			if isPaused() {
				continue
			}
			if quiet := clk.now() - e.out.idleSince(); quiet >= e.spec.IdleTimeout {
				idle = nil
				e.requestStop(stopIdle, 0)
			} else {
				idleTimer.Reset(e.spec.IdleTimeout - quiet)
			}
		case <-pauseCh:
			var paused bool
			paused, pauseCh = clk.state()
			if paused {
				continue
			}
			if deadline != nil {
				deadlineTimer.Reset(max(0, e.spec.Timeout-(clk.now()-start)))
			}
			if idle != nil {
				idleTimer.Reset(max(0, e.spec.IdleTimeout-(clk.now()-e.out.idleSince())))
			}
		case <-stopCh:
			stopCh = nil
			e.mu.Lock()
			grace := e.stopGrace
			e.mu.Unlock()
			stopDone = make(chan struct{})
			go func() {
				defer close(stopDone)
				e.stopProtocol(grace)
			}()
		}
	}

	e.mu.Lock()
	e.ended = time.Now()
	e.state = runbox.ExecExited
	lateCancel := stopDone == nil && e.reason == stopCancel
	if stopDone == nil {
		// The leader exited by itself before a stop requested at the same
		// moment began: its status stands.
		e.reason = stopNone
	}
	lateGrace := e.stopGrace
	e.mu.Unlock()
	e.cont.leaderReaped()
	close(e.leaderGone)
	if stopDone == nil && e.spec.KillLeftovers {
		// The leader exited by itself: what it left running is stopped
		// now, before the result, so its pipes close and the drain is short.
		stopDone = make(chan struct{})
		go func() {
			defer close(stopDone)
			e.stopProtocol(e.grace)
		}()
	}

	// Output already written is read; a background child holding a pipe
	// open can delay the result by at most Drain.
	drainBy := time.Now().Add(e.s.cfg.Drain)
	e.out.startDrain()
	_ = stdout.SetReadDeadline(drainBy)
	_ = stderr.SetReadDeadline(drainBy)
	if state != nil {
		_ = state.SetReadDeadline(drainBy)
	}
	readers.Wait()
	// A SpillUnsent exec's live stream gets a moment to send the rest;
	// what it has not sent by then (or lost earlier, after the last
	// chunk was read) is spilled now.
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
	e.dropStdin()
	stdout.Close()
	stderr.Close()
	if state != nil {
		state.Close()
	}
	if stopDone != nil {
		<-stopDone
	}
	e.stdinFeed.Wait()

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
