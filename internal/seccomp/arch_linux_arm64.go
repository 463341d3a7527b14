package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch         = unix.AUDIT_ARCH_AARCH64
	foreignSyscallBit = 0
)

// deniedArch are the arm64-only calls refused besides deniedCommon (none).
var deniedArch []uintptr

// chmodRulesArch and createRulesArch are the arm64-only calls that set a
// mode (none: arm64 has only the *at forms).
var chmodRulesArch, createRulesArch []ModeRule
