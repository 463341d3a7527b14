package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// execMarkerVar and daemonMarkerVar are set in every exec's environment:
// the exec's id, and a random value of the daemon's own, so that two
// daemons sharing a /proc (host sandboxes) never take each other's
// processes for their own, whatever exec ids their callers choose.
// Processes inherit them through fork and exec, so the proc tracker can
// find an exec's processes after they setsid, double-fork, are re-parented
// to the daemon or leave the exec's cgroup.
const (
	execMarkerVar   = "RUNBOX_EXEC_ID"
	daemonMarkerVar = "RUNBOX_DAEMON"
)

// procTracker finds an exec's processes through /proc: the processes whose
// initial environment carries the exec's markers, the leader while it is
// unreaped, and every descendant of either. It is the containment where
// there is no cgroup, and the search for escapees where there is one.
type procTracker struct {
	needles [][]byte // "\x00RUNBOX_EXEC_ID=<id>\x00", "\x00RUNBOX_DAEMON=<mark>\x00"; all must match
	self    int

	mu     sync.Mutex
	leader int // 0 once reaped (the pid may be reused)
}

// newProcTracker tracks the processes marked with execID (none when it is
// "": every process of the daemon) and daemonMark (any daemon when "").
func newProcTracker(execID, daemonMark string) *procTracker {
	p := &procTracker{self: os.Getpid()}
	if execID != "" {
		p.needles = append(p.needles, []byte("\x00"+execMarkerVar+"="+execID+"\x00"))
	}
	if daemonMark != "" {
		p.needles = append(p.needles, []byte("\x00"+daemonMarkerVar+"="+daemonMark+"\x00"))
	}
	return p
}

func (p *procTracker) leaderStarted(pid int) {
	p.mu.Lock()
	p.leader = pid
	p.mu.Unlock()
}

func (p *procTracker) leaderReaped() {
	p.mu.Lock()
	p.leader = 0
	p.mu.Unlock()
}

// procStat is the part of /proc/<pid>/stat the tracker needs.
type procStat struct {
	pid, ppid int
	zombie    bool
}

// readProcStat parses /proc/<pid>/stat; the command name may contain
// spaces and parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(fields[1])
	return procStat{pid: pid, ppid: ppid, zombie: fields[0] == "Z" || fields[0] == "X"}, true
}

// allProcs lists every process in this pid namespace's /proc.
func allProcs() []procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	procs := make([]procStat, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok {
			procs = append(procs, st)
		}
	}
	return procs
}

func (p *procTracker) hasMarker(pid int) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	// Prefix a NUL so the first variable matches like every other one.
	env = append([]byte{0}, env...)
	for _, n := range p.needles {
		if !bytes.Contains(env, n) {
			return false
		}
	}
	return len(p.needles) > 0
}

func (p *procTracker) pids() []int {
	p.mu.Lock()
	leader := p.leader
	p.mu.Unlock()

	procs := allProcs()
	children := make(map[int][]int, len(procs))
	alive := make(map[int]bool, len(procs))
	for _, st := range procs {
		children[st.ppid] = append(children[st.ppid], st.pid)
		alive[st.pid] = !st.zombie
	}
	member := make(map[int]bool)
	var walk func(pid int)
	walk = func(pid int) {
		if member[pid] || pid == p.self {
			return
		}
		member[pid] = true
		for _, c := range children[pid] {
			walk(c)
		}
	}
	if leader > 0 {
		walk(leader)
	}
	for _, st := range procs {
		if !member[st.pid] && !st.zombie && st.pid != p.self && p.hasMarker(st.pid) {
			walk(st.pid)
		}
	}
	pids := make([]int, 0, len(member))
	for pid := range member {
		if alive[pid] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll freezes the exec's processes, then kills them. SIGKILL alone
// chases a fork bomb: under a pids limit each kill frees a slot a survivor
// forks into, and on a loaded machine the bomb can outpace the scans for
// seconds. A stopped process cannot fork, so scans that stop every process
// they find run out of new ones; then everything found is killed. Processes
// forked between a scan and the signals are caught by the next scan; two
// scans in a row with nothing new end each phase.
func (p *procTracker) killAll() {
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		signalled := make(map[int]struct{})
		quiet := 0
		for range 50 {
			if signalPids(p.pids(), sig, signalled) > 0 {
				quiet = 0
			} else if quiet++; quiet == 2 {
				break
			}
		}
	}
}

func (p *procTracker) empty() bool { return len(p.pids()) == 0 }

func (p *procTracker) release() {}
