package local

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// Limits are a local sandbox's default resource limits.
type Limits struct {
	// Memory is the memory cgroup limit in bytes: its commands' memory,
	// tmpfs pages (/tmp) included.
	Memory int64
	// Pids bounds the commands' processes and threads together.
	Pids int64
	// CPUShares is the sandbox's cgroup v1 cpu.shares, a weight and not a
	// quota: a busy sandbox gets its share when the host is busy too, and
	// all of the CPU when it is not. 1024 is the weight of every top-level
	// group (system.slice, user.slice), and every local sandbox sits under
	// one group, runbox-local, of that weight: all local sandboxes together
	// cannot starve the host's other groups.
	CPUShares uint64
	// TmpSize bounds the sandbox's /tmp, a tmpfs of its own (its pages
	// also count against Memory).
	TmpSize int64
}

// Default limit sizes. DefaultLimits sizes the memory from the host.
const (
	// DefaultMaxMemory caps the default memory limit.
	DefaultMaxMemory = 4 << 30
	// DefaultPids is the default pids limit (this host's pid_max is
	// 32768 on a default kernel; a quarter of pid_max when that is less).
	DefaultPids = 4096
	// DefaultCPUShares is the default cpu.shares weight.
	DefaultCPUShares = 1024
	// DefaultTmpSize is the default size of a sandbox's /tmp.
	DefaultTmpSize = 1 << 30
	// DefaultMaxDisk caps the default disk bound (see DefaultDisk).
	DefaultMaxDisk = 10 << 30
	// FuseServerMinMemory is the least memory limit of a sandbox's FUSE
	// server, which is otherwise the sandbox's own: the server keeps a
	// node (some 600 bytes) for every name the sandbox has seen and a
	// table of 8 bytes per entry for every directory it is reading, so a
	// walk of a whole host root (`find / -xdev`, 169,000 names on the
	// test host: 96 MiB of the server's own, plus the host directories'
	// reclaimable cache) must fit even when --memory is small.
	FuseServerMinMemory = 256 << 20
)

// DefaultLimits returns the limits a local sandbox gets for what its spec
// leaves zero: memory min(DefaultMaxMemory, half the host's RAM), pids
// min(DefaultPids, a quarter of pid_max), cpu.shares DefaultCPUShares, and a
// /tmp (and /dev/shm) of min(DefaultTmpSize, half the memory limit, so
// that a full /tmp is ENOSPC and not an OOM kill). runbox serve and runbox mcp
// can use it as a ceiling's default.
func DefaultLimits() Limits {
	l := Limits{Memory: DefaultMaxMemory, Pids: DefaultPids, CPUShares: DefaultCPUShares, TmpSize: DefaultTmpSize}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		if half := int64(si.Totalram) * int64(si.Unit) / 2; half > 0 && half < l.Memory {
			l.Memory = half
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n/4 < l.Pids && n > 0 {
			l.Pids = n / 4
		}
	}
	if l.TmpSize > l.Memory/2 {
		l.TmpSize = l.Memory / 2
	}
	return l
}

// withDefaults gives spec the default limits where it has none, and turns
// Unlimited into none; it also returns the /tmp size (0: no bound, when the
// memory is unlimited too) and the cpu.shares to set.
func withDefaults(spec runbox.SandboxSpec) (runbox.SandboxSpec, int64, uint64) {
	d := DefaultLimits()
	tmp := d.TmpSize
	switch {
	case spec.Memory == 0:
		spec.Memory = d.Memory
	case spec.Memory == Unlimited:
		spec.Memory, tmp = 0, 0
	case spec.Memory/2 < tmp:
		tmp = spec.Memory / 2
	}
	switch spec.Pids {
	case 0:
		spec.Pids = d.Pids
	case Unlimited:
		spec.Pids = 0
	}
	if spec.CPUs == Unlimited {
		spec.CPUs = 0
	}
	return spec, tmp, d.CPUShares
}

// diskBound returns the disk bound of a sandbox under home (0: none):
// spec.Disk, else DefaultDisk; Unlimited is none. rootless, there is no
// way to mount the filesystem that would hold the bound: no bound by
// default, and an explicit one is refused (ErrLimitUnsupported).
func diskBound(spec runbox.SandboxSpec, home string, rootless bool) (int64, error) {
	switch {
	case spec.Disk == Unlimited:
		return 0, nil
	case spec.Disk > 0 && rootless:
		return 0, fmt.Errorf("%w: --disk needs root (a loop-mounted filesystem holds the sandbox's writable layer); without root a local sandbox's disk use is not bounded: ask for none (--disk 0), or run as root", ErrLimitUnsupported)
	case spec.Disk > 0 && spec.Disk < MinDisk:
		return 0, fmt.Errorf("disk bound %d bytes is below the %d MiB a sandbox's filesystem needs: %w", spec.Disk, MinDisk>>20, runbox.ErrInvalidSpec)
	case spec.Disk > 0:
		return spec.Disk, nil
	case rootless:
		return 0, nil
	}
	d, err := DefaultDisk(home)
	if err != nil {
		return 0, err
	}
	if d < MinDisk {
		return 0, fmt.Errorf("the filesystem of %s has %d MiB free, too little for a sandbox's default disk bound (half the free space, at least %d MiB): free some space, or ask for a bound (--disk SIZE) or none (--disk 0)", home, 2*d>>20, MinDisk>>20)
	}
	return d, nil
}
