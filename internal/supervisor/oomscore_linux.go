package supervisor

import (
	"os"
	"strconv"
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
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return // it has exited already
	}
	_, _ = f.WriteString(strconv.Itoa(value))
	f.Close()
}
