package supervisor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/mountinfo"
)

// cgroupParent is the daemon's own directory in the cgroup v2 hierarchy,
// under which each exec gets a child cgroup.
type cgroupParent struct {
	dir string
	fd  int // dir, open: exec cgroups are made and opened relative to it

	mu     sync.Mutex
	made   uint64   // exec cgroups created so far (their names: e1, e2, ...)
	free   []string // empty exec cgroups, ready for the next exec
	stray  []string // idle cgroups found populated: removed at shutdown
	closed bool     // remove was called: nothing is kept for reuse
}

// maxFreeCgroups bounds the empty exec cgroups kept for reuse: enough for
// a few execs at once to skip the mkdir and rmdir, few enough that an idle
// daemon holds next to nothing in the kernel.
const maxFreeCgroups = 4

// findCgroup2Dir returns the directory of this process's cgroup in the
// cgroup v2 hierarchy, from /proc/self/mountinfo and /proc/self/cgroup.
func findCgroup2Dir() (string, error) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	var mountPoint, mountRoot string
	sc := bufio.NewScanner(bytes.NewReader(info))
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 || fields[sep+1] != "cgroup2" {
			continue
		}
		mountRoot, mountPoint = mountinfo.Unescape(fields[3]), mountinfo.Unescape(fields[4])
		break
	}
	if mountPoint == "" {
		return "", errors.New("no cgroup2 mount in /proc/self/mountinfo")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for line := range strings.SplitSeq(string(self), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			rel, err := filepath.Rel(mountRoot, rest)
			if err != nil || strings.HasPrefix(rel, "..") {
				return "", fmt.Errorf("own cgroup %s is outside the cgroup2 mount root %s", rest, mountRoot)
			}
			return filepath.Join(mountPoint, rel), nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// newCgroupParent creates the daemon's cgroup directory for execs under
// own (empty: this process's cgroup), removing empty leftovers of daemons
// that died without cleaning up.
func newCgroupParent(own string) (*cgroupParent, error) {
	if own == "" {
		var err error
		if own, err = findCgroup2Dir(); err != nil {
			return nil, err
		}
	}
	removeStaleParents(own)
	dir := filepath.Join(own, fmt.Sprintf("runboxd-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return &cgroupParent{dir: dir, fd: fd}, nil
}

// removeStaleParents removes runboxd-<pid>-* cgroups under own whose daemon
// is gone, with their (empty) exec children.
func removeStaleParents(own string) {
	matches, _ := filepath.Glob(filepath.Join(own, "runboxd-*"))
	for _, m := range matches {
		var pid, n int
		if _, err := fmt.Sscanf(filepath.Base(m), "runboxd-%d-%d", &pid, &n); err != nil {
			continue
		}
		if syscall.Kill(pid, 0) == nil {
			continue // that daemon still runs (maybe a different one with a reused pid: leave it)
		}
		children, _ := filepath.Glob(filepath.Join(m, "e*"))
		for _, c := range children {
			_ = os.Remove(c)
		}
		_ = os.Remove(m)
	}
}

// newExec gives one exec a cgroup of its own, empty, and opens it for
// CLONE_INTO_CGROUP: one an earlier exec left empty when there is one
// (no mkdir, and no rmdir when that exec ended), else a new one. The
// returned fd belongs to the cgroupExec (closed by release).
func (p *cgroupParent) newExec() (*cgroupExec, int, error) {
	for {
		p.mu.Lock()
		var name string
		reused := len(p.free) > 0
		if reused {
			name, p.free = p.free[len(p.free)-1], p.free[:len(p.free)-1]
		} else {
			p.made++
			name = "e" + strconv.FormatUint(p.made, 10)
		}
		p.mu.Unlock()
		dir := filepath.Join(p.dir, name)
		if !reused {
			if err := unix.Mkdirat(p.fd, name, 0o755); err != nil {
				return nil, -1, fmt.Errorf("create exec cgroup: %w", &os.PathError{Op: "mkdir", Path: dir, Err: err})
			}
		}
		fd, err := unix.Openat(p.fd, name, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil && reused {
			continue // removed behind the daemon's back: make a new one
		}
		if err != nil {
			_ = unix.Rmdir(dir)
			return nil, -1, fmt.Errorf("open exec cgroup: %w", &os.PathError{Op: "open", Path: dir, Err: err})
		}
		events, err := unix.Openat(fd, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			events = -1 // empty falls back to cgroup.procs
		}
		if reused && populated(events) == 1 {
			// Someone (root in the sandbox) moved a process into the
			// idle cgroup since: it is not empty, so not the exec's own.
			// Leave it (removed at shutdown if it empties) and take another.
			unix.Close(fd)
			if events >= 0 {
				unix.Close(events)
			}
			p.mu.Lock()
			p.stray = append(p.stray, name)
			p.mu.Unlock()
			continue
		}
		return &cgroupExec{p: p, name: name, dir: dir, fd: fd, events: events}, fd, nil
	}
}

// recycle keeps the exec cgroup name, empty, for the next exec, and
// reports whether it did.
func (p *cgroupParent) recycle(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.free) >= maxFreeCgroups {
		return false
	}
	p.free = append(p.free, name)
	return true
}

// remove deletes the daemon's cgroup directory with the exec cgroups kept
// for reuse (the others must have been released).
func (p *cgroupParent) remove() error {
	p.mu.Lock()
	p.closed = true
	free := append(p.free, p.stray...)
	p.free, p.stray = nil, nil
	p.mu.Unlock()
	for _, name := range free {
		removeCgroup(filepath.Join(p.dir, name))
	}
	unix.Close(p.fd)
	return os.Remove(p.dir)
}

// cgroupExec is an exec's own cgroup: membership is the truth about what is
// alive, and no process can fork its way out of it.
type cgroupExec struct {
	p *cgroupParent
	// mu guards the cgroup's use against release: once released (dir
	// empty) the cgroup may already be another exec's, and every method
	// is a no-op.
	mu     sync.RWMutex
	name   string // under the parent
	dir    string
	fd     int  // the cgroup directory, open
	events int  // its cgroup.events, open (-1 if it could not be opened)
	killed bool // cgroup.kill was written: never reused
	frozen bool // cgroup.freeze was written: never reused
}

func (c *cgroupExec) pids() []int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.dir == "" {
		return nil
	}
	return c.pidsLocked()
}

func (c *cgroupExec) pidsLocked() []int {
	data, err := readAt(c.fd, "cgroup.procs")
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (c *cgroupExec) killAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		return
	}
	c.killed = true
	// cgroup.kill (Linux 5.14) kills every member, including ones forking
	// right now, in one step.
	if fd, err := unix.Openat(c.fd, "cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		_, werr := unix.Write(fd, []byte("1"))
		unix.Close(fd)
		if werr == nil {
			return
		}
	}
	signalPids(c.pidsLocked(), syscall.SIGKILL, nil)
}

func (c *cgroupExec) empty() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.dir == "" {
		return true
	}
	return c.emptyLocked()
}

func (c *cgroupExec) emptyLocked() bool {
	switch populated(c.events) {
	case 0:
		return true
	case 1:
		return false
	}
	return len(c.pidsLocked()) == 0
}

// populated reads an open cgroup.events: 1 when the cgroup has a live
// process, 0 when not, -1 when it cannot tell.
func populated(events int) int {
	if events < 0 {
		return -1
	}
	var buf [128]byte
	n, err := unix.Pread(events, buf[:], 0)
	if err != nil || n <= 0 {
		return -1
	}
	for line := range strings.SplitSeq(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			if strings.TrimSpace(v) == "0" {
				return 0
			}
			return 1
		}
	}
	return -1
}

// readAt reads the file name in the directory open as dirfd.
func readAt(dirfd int, name string) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

func (c *cgroupExec) leaderStarted(int) {}
func (c *cgroupExec) leaderReaped()     {}

// release lets go of the cgroup. One that is empty and was never killed
// is kept for the next exec (an empty cgroup is as good as a new one: the
// next exec is its only member from its first instruction); any other is
// removed.
func (c *cgroupExec) release() {
	c.mu.Lock()
	if c.dir == "" {
		c.mu.Unlock()
		return
	}
	dir, name := c.dir, c.name
	reuse := !c.killed && !c.frozen && populated(c.events) == 0
	c.dir = ""
	unix.Close(c.fd)
	if c.events >= 0 {
		unix.Close(c.events)
	}
	c.mu.Unlock()
	if reuse && c.p.recycle(name) {
		return
	}
	removeCgroup(dir)
}

// removeCgroup removes an exec cgroup whose processes are gone.
func removeCgroup(dir string) {
	// The kernel may report the cgroup populated for a moment after its last
	// process exits; retry briefly.
	for range 100 {
		err := unix.Rmdir(dir)
		if err == nil || err == unix.ENOENT || err != unix.EBUSY {
			return
		}
		time.Sleep(releaseRetryInterval)
	}
}

// cgroupEvents is an exec cgroup's cgroup.events file held open: the
// kernel wakes a poll on it when the cgroup's "populated" value changes,
// so the stop protocol sees the last process go as it goes instead of at
// its next look.
type cgroupEvents struct {
	fd  int
	buf [128]byte
}

// openEvents opens the exec's cgroup.events, or fails once the cgroup is
// released (its directory may then be another exec's: recycled). Under
// c.mu, as release changes c.dir.
func (c *cgroupExec) openEvents() (*cgroupEvents, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.dir == "" {
		return nil, errors.New("exec cgroup already released")
	}
	fd, err := unix.Open(filepath.Join(c.dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &cgroupEvents{fd: fd}, nil
}

func (w *cgroupEvents) close() { unix.Close(w.fd) }

// populated reads the file afresh; the read also arms the next poll, which
// wakes on any change made after it.
func (w *cgroupEvents) populated() (bool, error) {
	n, err := unix.Pread(w.fd, w.buf[:], 0)
	if err != nil {
		return false, err
	}
	for line := range bytes.SplitSeq(w.buf[:n], []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) != "0", nil
		}
	}
	return false, errors.New("cgroup.events has no populated line")
}

// waitEmpty waits up to d for the cgroup to have no process left, and
// reports whether it has none.
func (w *cgroupEvents) waitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		populated, err := w.populated()
		if err != nil {
			time.Sleep(time.Until(deadline))
			return false
		}
		if !populated {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		ts := unix.NsecToTimespec(left.Nanoseconds())
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLPRI}}
		if _, err := unix.Ppoll(fds, &ts, nil); err != nil && !errors.Is(err, unix.EINTR) {
			time.Sleep(time.Until(deadline))
			return false
		}
	}
}
