package supervisor

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/runbox/runbox/internal/ownthread"
)

// spawnThread forks every exec from one OS thread of its own, which has
// joined cgroup v1 groups the rest of the daemon is not in, or entered a
// view of the system of the commands' own (Config.SpawnSetup), or both. A child starts
// in its forking thread's cgroups, so each exec starts inside those groups
// from its first instruction, while the daemon's other threads stay out of
// them: a fork bomb that exhausts the groups' pids limit cannot take from
// the daemon the threads the Go runtime needs (it aborts the whole process
// when it cannot make one).
//
// The Go runtime makes new threads from a template thread, never from a
// thread a goroutine is locked to, so no other thread ever starts in those
// groups.
type spawnThread struct {
	requests chan spawnRequest
	quit     chan struct{}
}

type spawnRequest struct {
	path string
	argv []string
	attr *syscall.ProcAttr
	done chan spawnResult
}

type spawnResult struct {
	pid int
	err error
}

// startSpawnThread locks a goroutine to a thread other than the main one,
// writes "0" (the writing thread itself) to each cgroup v1 tasks file, runs
// setup (if any) there, and serves forks there until stop.
func startSpawnThread(tasksFiles []*os.File, setup func() error) (*spawnThread, error) {
	t := &spawnThread{requests: make(chan spawnRequest), quit: make(chan struct{})}
	joined := make(chan error, 1)
	// Not the main thread, which the runtime never ends: it would stay
	// in the groups after stop.
	ownthread.Go(func() { t.serve(tasksFiles, setup, joined) })
	if err := <-joined; err != nil {
		return nil, err
	}
	return t, nil
}

// serve runs on the spawn thread, locked to it and never unlocked: when it
// returns, the thread ends with it rather than serving other goroutines from
// inside the groups (or the commands' view that setup made).
func (t *spawnThread) serve(tasksFiles []*os.File, setup func() error, joined chan<- error) {
	for _, f := range tasksFiles {
		if _, err := f.WriteString("0"); err != nil {
			joined <- fmt.Errorf("spawn thread: join cgroup %s: %w", f.Name(), err)
			return
		}
	}
	if setup != nil {
		if err := setup(); err != nil {
			joined <- fmt.Errorf("spawn thread: %w", err)
			return
		}
	}
	joined <- nil
	for {
		select {
		case req := <-t.requests:
			pid, err := syscall.ForkExec(req.path, req.argv, req.attr)
			req.done <- spawnResult{pid, err}
		case <-t.quit:
			return
		}
	}
}

// forkExec forks and executes path on the spawn thread.
func (t *spawnThread) forkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	done := make(chan spawnResult, 1)
	select {
	case t.requests <- spawnRequest{path, argv, attr, done}:
	case <-t.quit:
		return 0, errSpawnThreadStopped
	}
	r := <-done
	return r.pid, r.err
}

// errSpawnThreadStopped is a fork asked for after the daemon shut down.
var errSpawnThreadStopped = errors.New("the daemon is shutting down")

// stop ends the thread after the fork it is serving, if any.
func (t *spawnThread) stop() { close(t.quit) }
