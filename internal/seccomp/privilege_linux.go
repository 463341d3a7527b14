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

// chmodRulesCommon are the chmod family on every architecture: the calls
// that change an existing file's mode.
var chmodRulesCommon = []ModeRule{
	{Nr: unix.SYS_FCHMOD, ModeArg: 1, Mask: privilegeBits},
	{Nr: unix.SYS_FCHMODAT, ModeArg: 2, Mask: privilegeBits},
	{Nr: unix.SYS_FCHMODAT2, ModeArg: 2, Mask: privilegeBits},
}

// createRulesCommon are the calls on every architecture that give a file
// they make a mode: open when it creates, the mknod and mkdir families.
var createRulesCommon = []ModeRule{
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
		DenyMode: concat(chmodRulesCommon, chmodRulesArch, createRulesCommon, createRulesArch),
	}
}

// LayerPrivilegeRules are PrivilegeRules, except that the chmod family
// with a setuid or setgid bit goes to the filter's listener, which applies
// the mode itself where the file lies on the sandbox's own root layer and
// refuses it anywhere else (internal/layerchmod). Creating calls with
// those bits stay refused: package managers create a file plainly and
// chmod it afterwards (dpkg: open(O_CREAT, 0), then fchmod(04755)).
func LayerPrivilegeRules() Rules {
	return Rules{
		NoSys:      []uintptr{unix.SYS_OPENAT2},
		DenyMode:   concat(createRulesCommon, createRulesArch),
		NotifyMode: concat(chmodRulesCommon, chmodRulesArch),
	}
}

func concat(lists ...[]ModeRule) []ModeRule {
	var all []ModeRule
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

// LoadPrivilegeFilter installs PrivilegeRules on the calling thread only
// (the spawn thread, so every command inherits it). The thread needs
// no_new_privs or CAP_SYS_ADMIN.
func LoadPrivilegeFilter() error { return Load(PrivilegeRules().Program(), 0) }

// LoadLayerPrivilegeFilter installs LayerPrivilegeRules on the calling
// thread only, and returns the filter's listener: until something serves
// it (layerchmod.Server), a notified call waits. The listener is
// close-on-exec. Only one filter with a listener may be in a thread's
// stack: a command that installs one of its own gets EBUSY.
func LoadLayerPrivilegeFilter() (*Listener, error) {
	fd, err := load(LayerPrivilegeRules().Program(), unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	if err != nil {
		return nil, err
	}
	return &Listener{fd: int(fd)}, nil
}
