package supervisor

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// A process caught in execve is read again execEnvRetries times at most,
// execEnvRetryPause apart (an exec takes well under a millisecond; 20 ms
// in all covers a loaded machine).
const (
	execEnvRetries    = 200
	execEnvRetryPause = 100 * time.Microsecond
)

// procTracker finds an exec's processes through /proc: the processes whose
// initial environment carries the exec's markers, the leader while it is
// unreaped, and every descendant of either. It is the containment where
// there is no cgroup, and the search for escapees where there is one.
type procTracker struct {
	needles [][]byte // "\x00RUNBOX_EXEC_ID=<id>\x00", "\x00RUNBOX_DAEMON=<mark>\x00"; all must match
	self    int
	// since is when the exec started, in clock ticks of CLOCK_BOOTTIME
	// (the clock of /proc/<pid>/stat's start time), or 0. A process that
	// started earlier was not forked by the exec and cannot have inherited
	// its markers, so its environment is not read (it is still walked as
	// a parent: see pids).
	since uint64

	mu     sync.Mutex
	leader int // 0 once reaped (the pid may be reused)
}

// newProcTracker tracks the processes marked with execID (none when it is
// "": every process of the daemon) and daemonMark (any daemon when ""),
// started from now on when execID is given. It is made just before the
// exec's leader is forked.
func newProcTracker(execID, daemonMark string) *procTracker {
	p := &procTracker{self: os.Getpid()}
	if execID != "" {
		p.needles = append(p.needles, []byte("\x00"+execMarkerVar+"="+execID+"\x00"))
		p.since = bootTicks()
	}
	if daemonMark != "" {
		p.needles = append(p.needles, []byte("\x00"+daemonMarkerVar+"="+daemonMark+"\x00"))
	}
	return p
}

// userHZ is the unit of /proc/<pid>/stat's start time (USER_HZ, 100 on
// every architecture Go supports on Linux).
const userHZ = 100

// bootTicks returns CLOCK_BOOTTIME in USER_HZ ticks, less one tick of
// slack, or 0 when the clock cannot be read (then nothing is skipped).
func bootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	t := uint64(ts.Sec)*userHZ + uint64(ts.Nsec)/(1e9/userHZ)
	if t > 0 {
		t--
	}
	return t
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
	start     uint64 // clock ticks after boot (field 22)
}

// parseProcStat parses the contents of /proc/<pid>/stat; the command name
// may contain spaces and parentheses, so fields are counted from the last
// ')'.
func parseProcStat(pid int, data []byte) (procStat, bool) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	st := procStat{pid: pid}
	// Fields from 3 (state) on, each after one space.
	field := 2
	for rest := data[i+1:]; len(rest) > 0 && field < 22; {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		f := rest[:j]
		rest = rest[j:]
		field++
		switch field {
		case 3:
			st.zombie = len(f) > 0 && (f[0] == 'Z' || f[0] == 'X')
		case 4:
			st.ppid, _ = strconv.Atoi(string(f))
		case 22:
			st.start, _ = strconv.ParseUint(string(bytes.TrimSpace(f)), 10, 64)
		}
	}
	return st, field >= 4
}

// readProcStat reads /proc/<pid>/stat.
func readProcStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(pid, data)
}

// procReader reads files of /proc relative to one open /proc directory
// into one reused buffer: three system calls per file (openat, read,
// close) where os.ReadFile makes five, and no allocation per file. A scan
// reads one file per process on the machine, so this is its cost.
type procReader struct {
	dir  int
	buf  []byte
	name []byte
}

func openProcReader() (*procReader, error) {
	fd, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &procReader{dir: fd, buf: make([]byte, 4096)}, nil
}

func (r *procReader) close() { unix.Close(r.dir) }

// pids lists the numeric entries of /proc.
func (r *procReader) pids() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// read returns the contents of /proc/<pid>/<file>, valid until the next
// read. These files are generated whole on each read: a read shorter than
// the buffer is the end of the file.
func (r *procReader) read(pid int, file string) ([]byte, bool) {
	r.name = strconv.AppendInt(r.name[:0], int64(pid), 10)
	r.name = append(r.name, '/')
	r.name = append(r.name, file...)
	fd, err := unix.Openat(r.dir, string(r.name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	n := 0
	for {
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		n += m
		if m == 0 || n < len(r.buf) {
			return r.buf[:n], true
		}
		r.buf = append(r.buf, make([]byte, len(r.buf))...)
	}
}

// allProcs lists every process in this pid namespace's /proc.
func allProcs() []procStat {
	r, err := openProcReader()
	if err != nil {
		return nil
	}
	defer r.close()
	return r.allProcs()
}

func (r *procReader) allProcs() []procStat {
	pids := r.pids()
	procs := make([]procStat, 0, len(pids))
	for _, pid := range pids {
		if data, ok := r.read(pid, "stat"); ok {
			if st, ok := parseProcStat(pid, data); ok {
				procs = append(procs, st)
			}
		}
	}
	return procs
}

// hasMarker reports whether st's environment carries the tracker's
// markers. A process in the middle of execve shows an empty environment
// (its new memory has no environment yet): it is read again until it
// shows one, or for up to execEnvRetries tries. Without that, a
// background command caught while it exec'd was not counted: the exec
// reported nothing left running, released its containment, and the
// process outlived the Cancel (1 in 150 in proc mode).
func (p *procTracker) hasMarker(r *procReader, st procStat) bool {
	if len(p.needles) == 0 {
		return false
	}
	env, ok := r.read(st.pid, "environ")
	// Kernel threads (kthreadd, pid 2, and its children) have none.
	for try := 0; ok && len(env) == 0 && st.pid != 2 && st.ppid != 2 && try < execEnvRetries; try++ {
		time.Sleep(execEnvRetryPause)
		env, ok = r.read(st.pid, "environ")
	}
	if !ok {
		return false
	}
	for _, n := range p.needles {
		// The first variable has no NUL before it.
		if !bytes.HasPrefix(env, n[1:]) && !bytes.Contains(env, n) {
			return false
		}
	}
	return true
}

func (p *procTracker) pids() []int { return p.pidsWith(nil) }

// pidsWith lists the exec's live processes, taking the processes that
// members returns (read after /proc's own list, so it names no process
// that /proc did not list) as the exec's too, without reading their
// environment: every descendant of theirs is the exec's as well.
func (p *procTracker) pidsWith(members func() []int) []int {
	p.mu.Lock()
	leader := p.leader
	p.mu.Unlock()

	r, err := openProcReader()
	if err != nil {
		return nil
	}
	defer r.close()
	procs := r.allProcs()
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
	if members != nil {
		for _, pid := range members() {
			if _, listed := alive[pid]; listed {
				walk(pid)
			}
		}
	}
	for _, st := range procs {
		if !member[st.pid] && !st.zombie && st.pid != p.self && st.start >= p.since && p.hasMarker(r, st) {
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
	p.signalUntilQuiet(syscall.SIGSTOP)
	p.signalUntilQuiet(syscall.SIGKILL)
}

func (p *procTracker) empty() bool { return len(p.pids()) == 0 }

func (p *procTracker) release() {}

// signalUntilQuiet sends sig to every process the tracker finds, scan
// after scan (at most 50), each process once, until two scans in a row
// find none it has not signalled.
func (p *procTracker) signalUntilQuiet(sig syscall.Signal) {
	signalled := make(map[int]struct{})
	quiet := 0
	for range 50 {
		if signalPids(p.pids(), sig, signalled) > 0 {
			quiet = 0
		} else if quiet++; quiet == 2 {
			return
		}
	}
}
