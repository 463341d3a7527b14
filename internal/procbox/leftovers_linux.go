package procbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/processrecord"
)

// daemonFileName is the file, in a sandbox's directory, that runboxd serve
// writes (--daemon-file) before it serves; the Store moves what it says
// into the record once runboxd answers.
const daemonFileName = "daemon.json"

// leftoverTimeout bounds how long Remove waits for the processes it killed
// to be gone. SIGKILL cannot be ignored: only a process in uninterruptible
// sleep makes it take longer than a moment.
const leftoverTimeout = 10 * time.Second

// daemonFile is what runboxd serve --daemon-file writes (cmd/runboxd).
type daemonFile struct {
	Pid        int    `json:"pid"`
	DaemonMark string `json:"daemon_mark"`
	Cgroup     string `json:"cgroup,omitempty"`
}

// validMark reports whether mark looks like runboxd's marker (16 to 64
// lower-case hex digits, random), so that a damaged value never matches
// more than it should.
func validMark(mark string) bool {
	if len(mark) < 16 || len(mark) > 64 {
		return false
	}
	for i := 0; i < len(mark); i++ {
		if c := mark[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// recordDaemonFile moves where runboxd's commands live from the file it
// wrote before serving (no command had run yet) into rec, saved in sbDir.
// A Kind that does not ask runboxd for the file leaves rec as it is.
func recordDaemonFile(path, sbDir string, rec *Record) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("runboxd's daemon file: %w", err)
	}
	var df daemonFile
	if err := json.Unmarshal(b, &df); err != nil {
		return fmt.Errorf("runboxd's daemon file %s: %w", path, err)
	}
	if df.Pid != rec.Pid || !validMark(df.DaemonMark) || df.Cgroup != "" && !filepath.IsAbs(df.Cgroup) {
		return fmt.Errorf("runboxd's daemon file %s: pid %d, marker %q, cgroup %q: want runboxd's pid %d, a hex marker, an absolute cgroup directory",
			path, df.Pid, df.DaemonMark, df.Cgroup, rec.Pid)
	}
	rec.DaemonMark, rec.Cgroup = df.DaemonMark, df.Cgroup
	if err := writeRecord(sbDir, *rec); err != nil {
		return err
	}
	return os.Remove(path)
}

// killLeftovers SIGKILLs every process that rec's runboxd, now gone, left
// running: everything in its cgroup (cgroup.kill), then every process of
// the caller's uid, started after runboxd, whose environment carries its
// RUNBOX_DAEMON marker (the escapees of the cgroup, and every process in
// proc mode). It waits, within leftoverTimeout, until none is left, removes
// the cgroups, and returns how many processes it killed. Nothing outside
// that cgroup and not carrying that marker is signalled. A record of
// another boot has nothing left.
func killLeftovers(ctx context.Context, rec Record) (int, error) {
	if rec.DaemonMark == "" && rec.Cgroup == "" || rec.BootID != "" && rec.BootID != processrecord.BootID() {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, leftoverTimeout)
	defer cancel()
	killed := 0
	if rec.Cgroup != "" {
		n, err := killCgroup(ctx, rec.Cgroup, rec.Pid)
		killed += n
		if err != nil {
			return killed, fmt.Errorf("kill what runboxd (pid %d) left in cgroup %s: %w", rec.Pid, rec.Cgroup, err)
		}
	}
	if validMark(rec.DaemonMark) {
		n, err := killMarked(ctx, rec.DaemonMark, rec.StartTime)
		killed += n
		if err != nil {
			return killed, fmt.Errorf("kill what runboxd (pid %d) left, marked RUNBOX_DAEMON=%s: %w", rec.Pid, rec.DaemonMark, err)
		}
	}
	return killed, nil
}

// killCgroup kills every process in the cgroup v2 directory dir and its
// children, waits until it is empty and removes it. dir must be what runboxd
// pid makes (runboxd-<pid>-<n>) on a cgroup v2 file system; one already
// gone is not an error.
func killCgroup(ctx context.Context, dir string, pid int) (int, error) {
	rest, ok := strings.CutPrefix(filepath.Base(dir), "runboxd-"+strconv.Itoa(pid)+"-")
	if _, err := strconv.ParseUint(rest, 10, 64); !ok || err != nil || filepath.Clean(dir) != dir || !filepath.IsAbs(dir) {
		return 0, fmt.Errorf("not a cgroup of runboxd pid %d", pid)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); errors.Is(err, unix.ENOENT) {
		return 0, nil
	} else if err != nil {
		return 0, err
	} else if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, errors.New("not on a cgroup v2 file system")
	}
	dirs := cgroupTree(dir)
	pids := map[int]bool{}
	collect := func() {
		for _, d := range dirs {
			for _, p := range cgroupProcs(d) {
				pids[p] = true
			}
		}
	}
	collect()
	// cgroup.kill (Linux 5.14) kills the whole tree at once, forks
	// included; without it, kill what is listed until nothing is.
	useKill := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil
	for {
		if !useKill {
			collect()
			for p := range pids {
				_ = killPid(p)
			}
		}
		if !populated(dir) {
			break
		}
		select {
		case <-ctx.Done():
			return len(pids), fmt.Errorf("processes still in it: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	slices.Reverse(dirs) // children first
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return len(pids), err
		}
	}
	return len(pids), nil
}

// cgroupTree returns dir and every cgroup under it, parents first.
func cgroupTree(dir string) []string {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs
}

// cgroupProcs returns the pids in dir's cgroup.procs.
func cgroupProcs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// populated reports whether dir's cgroup.events says a process is in its
// tree (true when it cannot be read but the directory is there).
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// killMarked SIGKILLs every process of the caller's uid that started at or
// after since (clock ticks after boot, /proc/<pid>/stat) and whose initial
// environment holds RUNBOX_DAEMON=mark, round after round until a round
// finds none, and returns how many it killed.
func killMarked(ctx context.Context, mark string, since uint64) (int, error) {
	needle := []byte("\x00RUNBOX_DAEMON=" + mark + "\x00")
	uid, self := uint32(os.Getuid()), os.Getpid()
	killed := map[[2]uint64]bool{} // pid, start time
	for {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return len(killed), err
		}
		found := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			fi, err := os.Stat("/proc/" + e.Name())
			if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uid {
				continue
			}
			state, start, err := processrecord.ProcStat(pid)
			if err != nil || start < since || state == 'Z' || state == 'X' {
				continue
			}
			// A child inside an exec shows an empty environment for a
			// moment: read again, or it survives the last round.
			env, err := processrecord.ReadExecData(pid, "environ", 100*time.Millisecond)
			if err != nil || !bytes.Contains(append([]byte{0}, env...), needle) {
				continue
			}
			if err := killPid(pid); err != nil {
				return len(killed), err
			}
			killed[[2]uint64{uint64(pid), start}] = true
			found++
		}
		if found == 0 {
			return len(killed), nil
		}
		select {
		case <-ctx.Done():
			return len(killed), fmt.Errorf("processes survive SIGKILL: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}
