package seccomp

import (
	"fmt"
	"syscall"

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

// Filter returns the local sandbox's filter program: deniedCommon and
// deniedArch refused, and clone and unshare refused when they ask for a new
// user namespace (in a user namespace of its own, the sandbox also caps
// their number at zero, which covers clone3, whose flags a filter cannot
// read). clone3 itself stays allowed: runboxd starts commands with it,
// straight into their cgroups.
func Filter() []unix.SockFilter {
	return Rules{
		Deny: append(append([]uintptr(nil), deniedCommon...), deniedArch...),
		DenyFlags: []FlagRule{
			{Nr: unix.SYS_CLONE, Mask: unix.CLONE_NEWUSER},
			{Nr: unix.SYS_UNSHARE, Mask: unix.CLONE_NEWUSER},
		},
	}.Program()
}

// Install sets no_new_privs on every thread of the calling process and
// installs Filter on all of them (SECCOMP_FILTER_FLAG_TSYNC), so every
// process they start from now on inherits both. It needs a process built
// without cgo (it uses syscall.AllThreadsSyscall).
func Install() error {
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		return fmt.Errorf("seccomp: set no_new_privs: %w", errno)
	}
	return Load(Filter(), unix.SECCOMP_FILTER_FLAG_TSYNC)
}
