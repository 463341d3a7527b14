package commandview

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/seccomp"
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

// DockerParityFilter returns a filter that gives commands what Docker's
// default profile gives a container without CAP_SYS_ADMIN, on top of the
// container's own profile (filters stack; the stricter answer wins): the
// CAP_SYS_ADMIN calls fail with EPERM, clone with a namespace flag fails
// with EPERM, and clone3 (whose flags a filter cannot read) fails with
// ENOSYS so that libc falls back to clone, unless clone3 is kept. On top,
// seccomp.PrivilegeRules: no setuid or setgid bit on a file, openat2
// ENOSYS. Calls under a foreign architecture (i386 or x32 on amd64) kill the process: the
// list above is by native numbers.
func DockerParityFilter(clone3 bool) []unix.SockFilter {
	// Besides Docker's parity: no setuid or setgid bit on any file a
	// command makes (security rule 4), as in a local sandbox.
	priv := seccomp.PrivilegeRules()
	r := seccomp.Rules{
		Deny:      sysAdminCalls,
		NoSys:     priv.NoSys,
		DenyFlags: []seccomp.FlagRule{{Nr: unix.SYS_CLONE, Mask: cloneNamespaceFlags}},
		DenyMode:  priv.DenyMode,
	}
	if !clone3 {
		r.NoSys = append(r.NoSys, unix.SYS_CLONE3)
	}
	return r.Program()
}

// loadFilter installs prog on the calling thread only. The thread holds
// CAP_SYS_ADMIN, so no_new_privs is not needed (setuid programs in the
// image keep working).
func loadFilter(prog []unix.SockFilter) error {
	if err := seccomp.Load(prog, 0); err != nil {
		return fmt.Errorf("commandview: the commands' filter: %w", err)
	}
	return nil
}
