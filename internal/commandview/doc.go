// Package commandview builds the view of the system runboxd's commands run in
// when runboxd is a container's PID 1 and its own files live in the
// container's filesystem: a mount namespace of the commands' own in which
// runboxd's directory (binary, socket, state, spill files) is an empty,
// read-only directory, with no more capabilities and system calls than
// Docker's default profile gives a container.
//
// runboxd keeps the container's original mount namespace, where `docker
// exec` (and so `runboxd proxy`) still finds its socket, and it keeps the
// capability it needs to build the view (CAP_SYS_ADMIN), which no command
// ever holds: the view is built on one OS thread (Enter), every command is
// forked from that thread, and what the thread changed (its mount
// namespace, bounding and inheritable capability sets, a seccomp filter)
// is inherited by every process the commands start. Nothing a command does
// to the filesystem can then reach runboxd's files: they are not in its
// view, the empty directory over them cannot be unmounted (no
// CAP_SYS_ADMIN; in a user namespace of its own the mounts are locked
// together), and /proc/1/root is closed to it (runboxd holds capabilities
// the command does not and is not dumpable).
package commandview
