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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/mountinfo"
)

// cgroupParent is the daemon's own directory in the cgroup v2 hierarchy,
// under which each exec gets a child cgroup.
type cgroupParent struct {
	dir string
}

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
	return &cgroupParent{dir: dir}, nil
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

// newExec creates the cgroup for one exec and opens it for CLONE_INTO_CGROUP.
func (p *cgroupParent) newExec(n uint64) (*cgroupExec, int, error) {
	dir := filepath.Join(p.dir, fmt.Sprintf("e%d", n))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, -1, fmt.Errorf("create exec cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, -1, fmt.Errorf("open exec cgroup: %w", err)
	}
	return &cgroupExec{dir: dir}, fd, nil
}

// remove deletes the daemon's cgroup directory (its exec children must have
// been released).
func (p *cgroupParent) remove() error {
	return os.Remove(p.dir)
}

// cgroupExec is an exec's own cgroup: membership is the truth about what is
// alive, and no process can fork its way out of it.
type cgroupExec struct {
	dir string
}

func (c *cgroupExec) pids() []int {
	data, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
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
	// cgroup.kill (Linux 5.14) kills every member, including ones forking
	// right now, in one step.
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	signalPids(c.pids(), syscall.SIGKILL, nil)
}

func (c *cgroupExec) empty() bool {
	data, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return len(c.pids()) == 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) == "0"
		}
	}
	return len(c.pids()) == 0
}

func (c *cgroupExec) leaderStarted(int) {}
func (c *cgroupExec) leaderReaped()     {}

func (c *cgroupExec) release() {
	// The kernel may report the cgroup populated for a moment after its last
	// process exits; retry briefly.
	for range 100 {
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		if !errors.Is(err, syscall.EBUSY) {
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

func (c *cgroupExec) openEvents() (*cgroupEvents, error) {
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
