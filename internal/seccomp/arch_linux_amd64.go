package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// foreignSyscallBit marks x32 calls, which the filter refuses outright.
	foreignSyscallBit = 0x40000000
)

// deniedArch are the amd64-only calls refused besides deniedCommon.
var deniedArch = []uintptr{
	unix.SYS_CREATE_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_QUERY_MODULE,
	unix.SYS_IOPERM, unix.SYS_IOPL,
	unix.SYS_NFSSERVCTL, unix.SYS__SYSCTL, unix.SYS_SYSFS, unix.SYS_USELIB, unix.SYS_USTAT,
}

// chmodRulesArch are the amd64-only calls of the chmod family.
var chmodRulesArch = []ModeRule{
	{Nr: unix.SYS_CHMOD, ModeArg: 1, Mask: privilegeBits},
}

// createRulesArch are the amd64-only calls that give a file they make a
// mode.
var createRulesArch = []ModeRule{
	{Nr: unix.SYS_OPEN, ModeArg: 2, Mask: privilegeBits, FlagsArg: 1, FlagsMask: creates},
	{Nr: unix.SYS_CREAT, ModeArg: 1, Mask: privilegeBits},
	{Nr: unix.SYS_MKNOD, ModeArg: 1, Mask: privilegeBits},
	{Nr: unix.SYS_MKDIR, ModeArg: 1, Mask: privilegeBits},
}
