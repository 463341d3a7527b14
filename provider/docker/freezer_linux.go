package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A cgroup freezer written directly: Pause on a local Docker engine
// freezes the container's cgroup itself (microseconds) instead of asking
// the engine (containerd, then a runc process that writes the same file and
// polls it: tens of milliseconds). The engine does not know: its state
// stays "running", so the provider keeps the truth in the sandbox's state
// directory (pausedFile names the freezer) and every path that would reach
// a frozen process checks it first: the dialer refuses, Get and List say
// paused, Remove thaws before it stops the container.

// Freezer knobs.
const (
	// freezeTimeout bounds the wait for the kernel to freeze every task
	// (a task in an uninterruptible sleep holds the cgroup in FREEZING);
	// past it the cgroup is thawed and Pause fails.
	freezeTimeout = 2 * time.Second
	// freezePoll is the first wait between reads of the freezer's state;
	// it doubles up to freezePollMax. Most freezes are done by the first read.
	freezePoll    = 20 * time.Microsecond
	freezePollMax = 10 * time.Millisecond
)

// cgroupFreezer is one container's freezer.
type cgroupFreezer struct {
	dir string // the container's cgroup directory
	v2  bool   // cgroup v2 (cgroup.freeze) rather than v1 (freezer.state)
}

// errNoFreezer says the container's cgroup has no freezer this process can
// find; Pause then goes through the engine.
var errNoFreezer = errors.New("no cgroup freezer of the container's")

// findFreezer finds the freezer of the container whose PID 1 is pid, from
// /proc/PID/cgroup and this process's mounts. The cgroup's name must hold
// containerID: a pid reused by another process after the container died
// does not lead to someone else's cgroup.
func findFreezer(pid int, containerID string) (cgroupFreezer, error) {
	if pid <= 0 || len(containerID) < 12 {
		return cgroupFreezer{}, errNoFreezer
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return cgroupFreezer{}, fmt.Errorf("%w: %w", errNoFreezer, err)
	}
	var v1, v2 string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "freezer" {
				v1 = parts[2]
			}
		}
	}
	try := func(cgPath, fstype, opt, file string, isV2 bool) (cgroupFreezer, bool) {
		if cgPath == "" || !strings.Contains(filepath.Base(cgPath), containerID) {
			return cgroupFreezer{}, false
		}
		mnt := cgroupMount(fstype, opt)
		if mnt == "" {
			return cgroupFreezer{}, false
		}
		dir := filepath.Join(mnt, filepath.Clean("/"+cgPath))
		if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
			return cgroupFreezer{}, false
		}
		return cgroupFreezer{dir: dir, v2: isV2}, true
	}
	if f, ok := try(v1, "cgroup", "freezer", "freezer.state", false); ok {
		return f, nil
	}
	if f, ok := try(v2, "cgroup2", "", "cgroup.freeze", true); ok {
		return f, nil
	}
	return cgroupFreezer{}, errNoFreezer
}

// cgroupMount is where this process sees the root of the cgroup hierarchy
// of fstype (with opt among its super options, for v1), or "".
func cgroupMount(fstype, opt string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts ... - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 || sf[0] != fstype || pf[3] != "/" {
			continue
		}
		if opt != "" && !strings.Contains(","+sf[2]+",", ","+opt+",") {
			continue
		}
		return unescapeMount(pf[4])
	}
	return ""
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// freeze freezes the cgroup and waits until every task in it is frozen;
// if that does not happen within freezeTimeout (or ctx ends), it thaws the
// cgroup again and fails.
func (f cgroupFreezer) freeze(ctx context.Context) error {
	if err := f.write(true); err != nil {
		return err
	}
	deadline := time.Now().Add(freezeTimeout)
	wait := freezePoll
	for {
		frozen, err := f.frozen()
		if err == nil && frozen {
			return nil
		}
		if err == nil && !f.v2 {
			// v1 moves from FREEZING to FROZEN only when asked again
			// (runc's freezer does the same).
			err = f.write(true)
		}
		if err == nil && time.Now().After(deadline) {
			err = fmt.Errorf("the cgroup %s did not freeze within %v (a task in an uninterruptible sleep?)", f.dir, freezeTimeout)
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			_ = f.write(false)
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, freezePollMax)
	}
}

// writable reports whether this process may freeze the cgroup.
func (f cgroupFreezer) writable() bool {
	file := "freezer.state"
	if f.v2 {
		file = "cgroup.freeze"
	}
	return unix.Access(filepath.Join(f.dir, file), unix.W_OK) == nil
}

// marker is what pausedFile holds for a cgroup Pause froze.
func (f cgroupFreezer) marker() string {
	if f.v2 {
		return "v2 " + f.dir + "\n"
	}
	return "v1 " + f.dir + "\n"
}

// parseFreezerMarker reads a marker back: the freezer of container id,
// whose name the cgroup's must hold.
func parseFreezerMarker(s, id string) (cgroupFreezer, bool) {
	v, dir, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok || (v != "v1" && v != "v2") || !filepath.IsAbs(dir) || id == "" || !strings.Contains(filepath.Base(dir), id) {
		return cgroupFreezer{}, false
	}
	return cgroupFreezer{dir: filepath.Clean(dir), v2: v == "v2"}, true
}

// thaw thaws the cgroup.
func (f cgroupFreezer) thaw() error { return f.write(false) }

func (f cgroupFreezer) write(frozen bool) error {
	file, val := "freezer.state", "THAWED"
	if f.v2 {
		file, val = "cgroup.freeze", "0"
		if frozen {
			val = "1"
		}
	} else if frozen {
		val = "FROZEN"
	}
	if err := os.WriteFile(filepath.Join(f.dir, file), []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup freezer: %w", err)
	}
	return nil
}

// frozen reports whether every task of the cgroup is frozen.
func (f cgroupFreezer) frozen() (bool, error) {
	if f.v2 {
		b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.events"))
		if err != nil {
			return false, fmt.Errorf("cgroup freezer: %w", err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if string(line) == "frozen 1" {
				return true, nil
			}
		}
		return false, nil
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "freezer.state"))
	if err != nil {
		return false, fmt.Errorf("cgroup freezer: %w", err)
	}
	return string(bytes.TrimSpace(b)) == "FROZEN", nil
}
