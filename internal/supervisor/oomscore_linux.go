package supervisor

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// DefaultCommandOOMScoreAdj is the oom_score_adj commands start with: the
// highest, so that when memory runs out (a sandbox's limit, which a
// container's daemon shares with its commands, or the machine's) the OOM
// killer takes a command before the daemon — as Kubernetes does with
// best-effort pods. Raising a process's value needs no privilege; lowering
// the daemon's would.
const DefaultCommandOOMScoreAdj = 1000

// setOOMScoreAdj gives a command its oom_score_adj as soon as it has started
// (Go's fork offers no hook between fork and exec). A process it forked
// before that (a child inherits its parent's value) keeps the daemon's value,
// so it competes with the daemon on size alone, as every process did without
// this. The window is microseconds on an idle machine and can reach
// milliseconds on a loaded one (CI saw a shell's first child fork inside it).
// The daemon itself never changes its own value.
func setOOMScoreAdj(pid, value int) {
	// Plain system calls, not os.File: an *os.File tries to register the
	// file with the poller and changes its flags, four system calls more on
	// the path of every exec.
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // it has exited already
	}
	_, _ = unix.Write(fd, []byte(strconv.Itoa(value)))
	unix.Close(fd)
}
