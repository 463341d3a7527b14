package processrecord

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat returns the state (field 3) and start time (field 22, clock
// ticks after boot) of pid from /proc/<pid>/stat.
func ProcStat(pid int) (state byte, start uint64, err error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, 0, err
	}
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

// statFields returns the fields of /proc/<pid>/stat from field 3 (the
// state) on. The command name (field 2) is in parentheses and may itself
// contain spaces and parentheses: the fields that follow start after the
// last ')'.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
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

// pfKthread is PF_KTHREAD in /proc/<pid>/stat's flags (field 9).
const pfKthread = 0x00200000

// ReadExecData reads /proc/<pid>/<name>, name being cmdline or environ:
// the arguments or environment the process's last exec was given. Inside
// an exec a process shows both empty for a moment: its new memory holds
// them before the kernel says where, and that moment comes after the exec
// closed its close-on-exec descriptors, so after os/exec's Start returned
// (6-9% of starts here). So an empty answer from a live process that is
// not a kernel thread is read again, every millisecond, for at most
// settle; a process whose arguments or environment really are empty costs
// that wait.
func ReadExecData(pid int, name string, settle time.Duration) ([]byte, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/" + name
	deadline := time.Now().Add(settle)
	for {
		b, err := os.ReadFile(path)
		if err != nil || len(b) > 0 || !mayBeInExec(pid) || time.Now().After(deadline) {
			return b, err
		}
		time.Sleep(time.Millisecond)
	}
}

// mayBeInExec reports whether pid is a live user process, which an empty
// cmdline or environ may mean is inside an exec.
func mayBeInExec(pid int) bool {
	f, err := statFields(pid)
	// f[0] is field 3 (state); field 9 (flags) is f[6].
	if err != nil || len(f) < 7 || f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfKthread == 0
}
