package seccomp

import "golang.org/x/sys/unix"

// privilegeBits are the mode bits a sandbox may not set: setuid and setgid.
// no_new_privs already keeps them from taking effect inside; outside, on
// the host's view of the workspace, a setuid-root file would (security rule
// 4: no privilege leaves a sandbox).
const privilegeBits = unix.S_ISUID | unix.S_ISGID

// creates are the open flags under which the mode argument is used:
// O_CREAT, and O_TMPFILE without the O_DIRECTORY it carries (an ordinary
// directory open does not create, and its mode argument is garbage).
const creates = unix.O_CREAT | (unix.O_TMPFILE &^ unix.O_DIRECTORY)

// privilegeRulesCommon are the calls on every architecture that set a
// file's mode: the chmod family always, open and the mknod and mkdir
// families when they create.
var privilegeRulesCommon = []ModeRule{
	{Nr: unix.SYS_FCHMOD, ModeArg: 1, Mask: privilegeBits},
	{Nr: unix.SYS_FCHMODAT, ModeArg: 2, Mask: privilegeBits},
	{Nr: unix.SYS_FCHMODAT2, ModeArg: 2, Mask: privilegeBits},
	{Nr: unix.SYS_OPENAT, ModeArg: 3, Mask: privilegeBits, FlagsArg: 2, FlagsMask: creates},
	{Nr: unix.SYS_MKNODAT, ModeArg: 2, Mask: privilegeBits},
	{Nr: unix.SYS_MKDIRAT, ModeArg: 2, Mask: privilegeBits},
}

// PrivilegeRules returns Rules that refuse, with EPERM, every call that
// would give a file the setuid or setgid bit, and answer openat2 (whose
// mode lies in a struct a filter cannot read) with ENOSYS, so callers fall
// back to openat. They are for the commands' spawn thread only: runboxd
// itself keeps openat2, and strips the bits from the modes it applies.
func PrivilegeRules() Rules {
	return Rules{
		NoSys:    []uintptr{unix.SYS_OPENAT2},
		DenyMode: append(append([]ModeRule(nil), privilegeRulesCommon...), privilegeRulesArch...),
	}
}

// LoadPrivilegeFilter installs PrivilegeRules on the calling thread only
// (the spawn thread, so every command inherits it). The thread needs
// no_new_privs or CAP_SYS_ADMIN.
func LoadPrivilegeFilter() error { return Load(PrivilegeRules().Program(), 0) }
