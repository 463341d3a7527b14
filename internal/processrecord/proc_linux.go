package processrecord

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcStat returns the state (field 3) and start time (field 22, clock
// ticks after boot) of pid from /proc/<pid>/stat.
func ProcStat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may itself contain
	// spaces and parentheses: the fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return f[0][0], start, nil
}

// SameProcess reports whether pid is alive (not a zombie) and started at
// start.
func SameProcess(pid int, start uint64) bool {
	state, s, err := ProcStat(pid)
	if err != nil {
		return false
	}
	return s == start && state != 'Z' && state != 'X' && state != 'x'
}

// BootID returns the kernel's boot id, or "" when it cannot be read.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
