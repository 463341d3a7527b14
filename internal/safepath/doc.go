// Package safepath opens caller-given paths beneath a root without
// following symlinks, so a path that was merely cleaned cannot be turned
// into somewhere else by a link a sandbox planted (ROOT/a/escape -> /).
//
// Each component is resolved by the kernel, one at a time, relative to the
// directory opened before it: openat2 with RESOLVE_BENEATH,
// RESOLVE_NO_SYMLINKS and RESOLVE_NO_MAGICLINKS, or, where openat2 is
// missing (ENOSYS), a walk of openat(O_NOFOLLOW|O_DIRECTORY) calls. The
// caller gets the opened directory itself; use it (or compare its device
// and inode with what is used later) rather than the path, which can be
// swapped after the check.
//
// It does not make paths that are already symlink-free safe to use by name
// later: that is the caller's part.
package safepath

import "errors"

// ErrUnsafe is wrapped by every refusal of a path: it names a symlink, a
// ".." component or a non-directory on the way, or leaves its root.
var ErrUnsafe = errors.New("unsafe path")
