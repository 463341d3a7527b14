package supervisor

import (
	"syscall"
)

// containment finds and signals every process of one exec.
type containment interface {
	// pids lists the exec's live processes (zombies excluded where the mode
	// can tell).
	pids() []int
	// killAll sends SIGKILL to every process of the exec, atomically where
	// the kernel allows it.
	killAll()
	// empty reports whether no process of the exec is alive.
	empty() bool
	// leaderStarted records the leader's pid once it is spawned.
	leaderStarted(pid int)
	// leaderReaped records that the leader's pid has been reaped and may be
	// reused by an unrelated process.
	leaderReaped()
	// freeze freezes (on) or thaws the exec's processes, for a pause of
	// the sandbox.
	freeze(on bool) error
	// release frees what the containment holds (the cgroup directory). It
	// is called once no process is left.
	release()
}

// signalPids sends sig to each pid, skipping those in skip (and adding the
// ones it signals to skip when skip is not nil). It returns how many it
// signalled successfully.
func signalPids(pids []int, sig syscall.Signal, skip map[int]struct{}) int {
	n := 0
	for _, pid := range pids {
		if skip != nil {
			if _, done := skip[pid]; done {
				continue
			}
		}
		if err := syscall.Kill(pid, sig); err == nil {
			n++
			if skip != nil {
				skip[pid] = struct{}{}
			}
		}
	}
	return n
}
