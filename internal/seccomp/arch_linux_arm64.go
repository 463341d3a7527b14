package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch         = unix.AUDIT_ARCH_AARCH64
	foreignSyscallBit = 0
)

// deniedArch are the arm64-only calls refused besides deniedCommon (none).
var deniedArch []uintptr

// privilegeRulesArch are the arm64-only calls that set a mode (none: arm64
// has only the *at forms).
var privilegeRulesArch []ModeRule
