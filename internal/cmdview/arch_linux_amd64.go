package cmdview

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// foreignSyscallBit marks x32 calls.
	foreignSyscallBit = 0x40000000
)
