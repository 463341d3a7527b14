// Package landlock scopes a sandbox's commands with Landlock (Linux 6.12+,
// ABI 6): what they may reach outside their own domain, whatever their
// network namespace shares.
package landlock

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ScopeABI is the first Landlock ABI with scoping (abstract unix sockets
// and signals).
const ScopeABI = 6

// ErrUnsupported means the kernel's Landlock is absent, disabled, or older
// than ScopeABI.
var ErrUnsupported = errors.New("landlock: scoping needs Landlock ABI 6 (Linux 6.12+)")

// rulesetAttr is struct landlock_ruleset_attr up to its scoped field.
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// ABI returns the kernel's Landlock ABI version, or 0 without Landlock.
func ABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// ScopeOut restricts the calling thread, and everything it starts from
// then on, so that it can neither connect to an abstract unix socket nor
// signal a process made outside its Landlock domain: a sandbox sharing the
// host's network namespace cannot reach the host's abstract sockets (a
// desktop bus, a container engine's shim), and its commands cannot signal
// runboxd. It needs no_new_privs set, and restricts only the calling OS
// thread (lock it). Call it once per thread: each call stacks a layer.
func ScopeOut() error {
	if ABI() < ScopeABI {
		return ErrUnsupported
	}
	attr := rulesetAttr{scoped: unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("landlock: create ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict: %w", errno)
	}
	return nil
}
