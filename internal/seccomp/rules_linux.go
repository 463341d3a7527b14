package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Rules describe a filter program: every call not named is allowed; a call
// under a foreign architecture (x32 on amd64) kills the process, as the
// numbers below are native ones.
type Rules struct {
	// Deny are refused with EPERM.
	Deny []uintptr
	// NoSys are answered ENOSYS, so libc falls back to an older call
	// (clone3 to clone) that the filter can look into.
	NoSys []uintptr
	// DenyFlags refuse a call with EPERM when its first argument has any
	// of Mask's bits (clone's or unshare's namespace flags).
	DenyFlags []FlagRule
	// DenyMode refuse a call with EPERM when the mode it applies has any
	// of a rule's bits (setuid and setgid: PrivilegeRules).
	DenyMode []ModeRule
	// NotifyMode hand a call to the filter's listener (user notification)
	// when the mode it applies has any of a rule's bits: the listener
	// answers for the kernel (the chmod family with setuid or setgid:
	// LayerPrivilegeRules and internal/layerchmod). A DenyMode rule on the
	// same call number comes first and wins.
	NotifyMode []ModeRule
}

// ModeRule refuses call Nr when its argument ModeArg has a bit of Mask and,
// if FlagsMask is not zero, its argument FlagsArg has a bit of FlagsMask
// (open's O_CREAT: the mode counts only when the call creates).
type ModeRule struct {
	Nr        uintptr
	ModeArg   int
	Mask      uint32
	FlagsArg  int
	FlagsMask uint32
}

// FlagRule refuses call Nr when its first argument has a bit of Mask.
type FlagRule struct {
	Nr   uintptr
	Mask uint32
}

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits of args[0] on a little-endian machine
)

// offArg is the offset of the low 32 bits of args[i].
func offArg(i int) uint32 { return offArg0 + 8*uint32(i) }

// Program assembles the rules into classic BPF.
func (r Rules) Program() []unix.SockFilter {
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
	noSys := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	notify := stmt(ret, unix.SECCOMP_RET_USER_NOTIF)
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
	for _, nr := range r.Deny {
		prog = append(prog, jump(jeq, uint32(nr), 0, 1), deny)
	}
	for _, nr := range r.NoSys {
		prog = append(prog, jump(jeq, uint32(nr), 0, 1), noSys)
	}
	// Each block loads the argument over the call number, but every path
	// through it returns, so the next block still sees the number.
	for _, f := range r.DenyFlags {
		prog = append(prog,
			jump(jeq, uint32(f.Nr), 0, 4),
			stmt(ld, offArg0),
			jump(jset, f.Mask, 0, 1),
			deny,
			allow,
		)
	}
	modeBlock := func(m ModeRule, action unix.SockFilter) {
		if m.FlagsMask == 0 {
			prog = append(prog,
				jump(jeq, uint32(m.Nr), 0, 4),
				stmt(ld, offArg(m.ModeArg)),
				jump(jset, m.Mask, 0, 1),
				action,
				allow,
			)
			return
		}
		prog = append(prog,
			jump(jeq, uint32(m.Nr), 0, 6),
			stmt(ld, offArg(m.FlagsArg)),
			jump(jset, m.FlagsMask, 0, 3),
			stmt(ld, offArg(m.ModeArg)),
			jump(jset, m.Mask, 0, 1),
			action,
			allow,
		)
	}
	for _, m := range r.DenyMode {
		modeBlock(m, deny)
	}
	for _, m := range r.NotifyMode {
		modeBlock(m, notify)
	}
	return append(prog, allow)
}

// Load installs prog on the calling thread, and with
// SECCOMP_FILTER_FLAG_TSYNC in flags on every thread of the process. The
// thread needs no_new_privs or CAP_SYS_ADMIN.
func Load(prog []unix.SockFilter, flags uintptr) error {
	r, err := load(prog, flags)
	if err != nil {
		return err
	}
	if r != 0 {
		// With TSYNC, a positive return is the id of a thread that could
		// not be synchronised.
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}

// load is the seccomp(SECCOMP_SET_MODE_FILTER) call: its result is a
// thread id under TSYNC, a listener descriptor under NEW_LISTENER.
func load(prog []unix.SockFilter, flags uintptr) (uintptr, error) {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return 0, fmt.Errorf("seccomp: install filter: %w", errno)
	}
	return r, nil
}
