package providertest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/processrecord"
)

// This file looks at processes through this machine's /proc, for providers
// whose sandboxes share the host's process table (host, local): the view
// from outside runboxd that survivor checks need.

// procStat is what the suite reads from /proc/<pid>/stat.
type procStat struct {
	pid   int
	state byte
	ppid  int
}

// readStat parses /proc/<pid>/stat. The command name may contain spaces and
// parentheses, so fields are counted from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(b[i+2:]))
	if len(fields) < 2 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: too few fields", pid)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat ppid: %w", pid, err)
	}
	return procStat{pid: pid, state: fields[0][0], ppid: ppid}, nil
}

// pids lists the numeric entries of /proc.
func pids() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list /proc: %w", err)
	}
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// ProcCount counts live, non-zombie processes on this machine whose command
// line, with its arguments joined by spaces, contains marker. Processes that
// exit during the scan are skipped.
func ProcCount(marker string) (int, error) {
	all, err := pids()
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	n := 0
	for _, pid := range all {
		if pid == self {
			continue
		}
		// A process inside an exec shows an empty cmdline for a moment:
		// read again, so one that has just started is counted.
		cmdline, err := processrecord.ReadExecData(pid, "cmdline", time.Second)
		if err != nil || len(cmdline) == 0 {
			continue // gone, or a kernel thread, or a zombie (empty cmdline)
		}
		line := string(bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '}))
		if !strings.Contains(line, marker) {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.state == 'Z' || st.state == 'X' {
			continue
		}
		n++
	}
	return n, nil
}

// ProcZombies counts zombie processes (State Z) on this machine that descend
// from root, found by following each zombie's parent chain.
func ProcZombies(root int) (int, error) {
	all, err := pids()
	if err != nil {
		return 0, err
	}
	parent := make(map[int]int, len(all))
	var zombies []int
	for _, pid := range all {
		st, err := readStat(pid)
		if err != nil {
			continue
		}
		parent[pid] = st.ppid
		if st.state == 'Z' {
			zombies = append(zombies, pid)
		}
	}
	n := 0
	for _, z := range zombies {
		seen := 0
		for p := parent[z]; p > 1 && seen < len(parent); p = parent[p] {
			if p == root {
				n++
				break
			}
			seen++
		}
	}
	return n, nil
}

// ProcRSS returns the resident set size of pid in bytes, from VmRSS in
// /proc/<pid>/status.
func ProcRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss of %d: %w", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse VmRSS of %d: %q", pid, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmRSS of %d: %w", pid, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("read rss of %d: no VmRSS line", pid)
}

// CPUTicks is the CPU time (utime + stime, in clock ticks) /proc says pid
// has used: a frozen process's does not move.
func CPUTicks(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the whole line.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// Frozen reports whether the busy loop pid gains no CPU tick in 300 ms
// (a running one gains about 30).
func Frozen(t testing.TB, pid int) bool {
	t.Helper()
	c1 := CPUTicks(t, pid)
	time.Sleep(300 * time.Millisecond)
	return CPUTicks(t, pid) == c1
}

// Runs reports whether the busy loop pid gains a CPU tick within 30 s.
func Runs(t testing.TB, pid int) bool {
	t.Helper()
	c1 := CPUTicks(t, pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if CPUTicks(t, pid) > c1 {
			return true
		}
	}
	return false
}
