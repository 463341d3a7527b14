package cmdview

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysAdminCalls are the calls Docker's default seccomp profile allows only
// to a container with CAP_SYS_ADMIN (besides clone and clone3, handled
// apart); without it they fail with EPERM, the profile's default action.
var sysAdminCalls = []uintptr{
	unix.SYS_BPF, unix.SYS_FANOTIFY_INIT, unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_MOUNT_SETATTR, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSOPEN, unix.SYS_FSPICK,
	unix.SYS_PERF_EVENT_OPEN, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD,
	unix.SYS_SETDOMAINNAME, unix.SYS_SETHOSTNAME, unix.SYS_SETNS, unix.SYS_SYSLOG,
	unix.SYS_UNSHARE,
}

// cloneNamespaceFlags are the clone flags Docker's profile refuses without
// CAP_SYS_ADMIN (its mask 0x7E020000: CLONE_NEWNS, CLONE_NEWCGROUP,
// CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET).
const cloneNamespaceFlags = 0x7E020000

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits of args[0] on a little-endian machine
)

// DockerParityFilter returns a filter that gives commands what Docker's
// default profile gives a container without CAP_SYS_ADMIN, on top of the
// container's own profile (filters stack; the stricter answer wins): the
// CAP_SYS_ADMIN calls fail with EPERM, clone with a namespace flag fails
// with EPERM, and clone3 (whose flags a filter cannot read) fails with
// ENOSYS so that libc falls back to clone, unless clone3 is kept. Calls
// under a foreign architecture (i386 or x32 on amd64) kill the process: the
// list above is by native numbers.
func DockerParityFilter(clone3 bool) []unix.SockFilter {
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
	eperm := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	allow := stmt(ret, unix.SECCOMP_RET_ALLOW)
	kill := stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)

	prog := []unix.SockFilter{
		stmt(ld, offArch),
		jump(jeq, auditArch, 1, 0),
		kill,
		stmt(ld, offNr),
	}
	if foreignSyscallBit != 0 {
		prog = append(prog, jump(jge, foreignSyscallBit, 0, 1), kill)
	}
	for _, nr := range sysAdminCalls {
		prog = append(prog, jump(jeq, uint32(nr), 0, 1), eperm)
	}
	if !clone3 {
		prog = append(prog, jump(jeq, unix.SYS_CLONE3, 0, 1), stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS)))
	}
	// clone(flags, ...): no new namespace. Last: it overwrites the
	// accumulator and always returns.
	prog = append(prog,
		jump(jeq, unix.SYS_CLONE, 0, 4),
		stmt(ld, offArg0),
		jump(jset, cloneNamespaceFlags, 0, 1),
		eperm,
		allow,
	)
	return append(prog, allow)
}

// loadFilter installs prog on the calling thread only. The thread holds
// CAP_SYS_ADMIN, so no_new_privs is not needed (setuid programs in the
// image keep working).
func loadFilter(prog []unix.SockFilter) error {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("cmdview: install the commands' seccomp filter: %w", errno)
	}
	return nil
}
