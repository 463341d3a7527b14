package seccomp

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deniedCommon are the calls refused on every architecture: what a
// sandboxed command never needs and what reaches the host's kernel state.
var deniedCommon = []uintptr{
	unix.SYS_ACCT,
	unix.SYS_ADD_KEY, unix.SYS_KEYCTL, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF,
	unix.SYS_CLOCK_ADJTIME, unix.SYS_CLOCK_SETTIME, unix.SYS_SETTIMEOFDAY,
	unix.SYS_DELETE_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_INIT_MODULE,
	unix.SYS_KEXEC_FILE_LOAD, unix.SYS_KEXEC_LOAD,
	unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_QUOTACTL,
	unix.SYS_REBOOT,
	unix.SYS_SETNS,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF,
	unix.SYS_SYSLOG,
	unix.SYS_USERFAULTFD,
	unix.SYS_VHANGUP,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}

// DeniedErrno is what a denied call returns.
const DeniedErrno = unix.EPERM

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits of args[0] on a little-endian machine
)

// Filter returns the sandbox's filter program.
//
// clone and unshare are refused when they ask for a new user namespace (in
// a user namespace of its own, the sandbox also caps their number at zero,
// which covers clone3, whose flags a filter cannot read). clone3 itself
// stays allowed: runboxd starts commands with it, straight into their
// cgroups.
func Filter() []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	deny := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(DeniedErrno))
	allow := stmt(ret, unix.SECCOMP_RET_ALLOW)

	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jump(jeq, auditArch, 1, 0),
		stmt(ret, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(ld, offNr),
	}
	if foreignSyscallBit != 0 {
		// Calls of another ABI on the same architecture (x32).
		prog = append(prog, jump(jge, foreignSyscallBit, 0, 1), stmt(ret, unix.SECCOMP_RET_KILL_PROCESS))
	}
	for _, nr := range append(deniedCommon, deniedArch...) {
		prog = append(prog, jump(jeq, uint32(nr), 0, 1), deny)
	}
	// clone(flags, ...) and unshare(flags): no new user namespace.
	for _, nr := range []uintptr{unix.SYS_CLONE, unix.SYS_UNSHARE} {
		prog = append(prog,
			jump(jeq, uint32(nr), 0, 4),
			stmt(ld, offArg0),
			jump(jset, unix.CLONE_NEWUSER, 0, 1),
			deny,
			allow,
		)
	}
	return append(prog, allow)
}

// Install sets no_new_privs on every thread of the calling process and
// installs Filter on all of them (SECCOMP_FILTER_FLAG_TSYNC), so every
// process they start from now on inherits both. It needs a process built
// without cgo (it uses syscall.AllThreadsSyscall).
func Install() error {
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		return fmt.Errorf("seccomp: set no_new_privs: %w", errno)
	}
	return load(unix.SECCOMP_FILTER_FLAG_TSYNC)
}

// load installs Filter on the calling thread, and with
// SECCOMP_FILTER_FLAG_TSYNC on every thread of the process.
func load(flags uintptr) error {
	prog := Filter()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	if r != 0 {
		// With TSYNC, a positive return is the id of a thread that could
		// not be synchronised.
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}
