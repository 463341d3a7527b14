// Package layerchmod lets the commands of a local sandbox give setuid and
// setgid bits to files of the sandbox's own root layer, and to nothing
// else (security rule 4: no privilege bit leaves a sandbox).
//
// The commands' seccomp filter (seccomp.LayerPrivilegeRules) hands every
// chmod, fchmod, fchmodat and fchmodat2 whose mode has one of those bits
// to a user-notification listener; a Server, in runboxd, answers them.
// The kernel never runs such a call itself (no
// SECCOMP_USER_NOTIF_FLAG_CONTINUE, whose check-then-run is open to a
// swap of a path component). The server does the call on the caller's
// behalf, on an object it holds:
//
//   - It pins the caller's objects through /proc/TID: its root, its
//     working directory or directory descriptor, or fchmod's descriptor
//     (O_PATH opens of the magic links: the very dentry and mount the
//     caller holds), reads the path from /proc/TID/mem, and reads the
//     caller's credentials from /proc/TID/status; then it checks that the
//     notification is still valid, so all of that was read of the calling
//     thread and not of a successor with its id.
//   - On a thread of its own (its own root, working directory and
//     credentials), it chroots to the caller's root and takes on the
//     caller's file-system credentials: fsuid, fsgid, supplementary groups
//     and effective capabilities. It resolves the path from the pinned
//     start with openat2(O_PATH, RESOLVE_NO_MAGICLINKS), honouring
//     AT_SYMLINK_NOFOLLOW, so the kernel checks every component's search
//     permission as it would for the caller, and yields one object that no
//     later rename can change.
//   - It allows the call only if that object is a regular file or a
//     directory on the root layer's mount (its statx mount id is the one
//     of the layer, taken at start): never in the workspace (an id-mapped
//     mount of a host directory), /root, /home, /tmp or any other mount. A
//     symlink met under AT_SYMLINK_NOFOLLOW gets EOPNOTSUPP, as from the
//     kernel; anything else gets EPERM.
//   - It applies the mode with fchmodat2(AT_EMPTY_PATH) on that object,
//     still as the caller: the kernel's own checks decide (only the owner
//     or CAP_FOWNER, setgid cleared for a group the caller is not in
//     without CAP_FSETID, EROFS), and its errno is the answer.
//
// What it does not do: creating calls (open with O_CREAT, mkdir, mknod)
// with a setuid or setgid mode stay refused by the filter; magic links
// (/proc/self/fd/N) in a path are refused (ELOOP); a chmod through a
// descriptor the caller opened with O_PATH fails with EBADF as in the
// kernel. The layer's files belong to the sandbox's unprivileged host ids
// and lie under the runbox home, in directories closed to other host
// users, so a bit set there gives nobody on the host anything.
package layerchmod
