// Package local is runbox's embedded default provider: each sandbox is a set
// of Linux namespaces (mount, pid, uts, ipc, cgroup; net with network
// "none"; user when not root, or on request) with runboxd as its PID 1.
//
// The sandbox sees the host's root filesystem read-only under a writable
// overlay whose upper directory is in the sandbox's state directory (or a
// given root filesystem directory in place of the host's), a fresh /proc, a
// minimal /dev, a private /tmp, and the workspace directory bind-mounted
// read-write at /workspace, its default working directory. runboxd opens
// its socket in the state directory before it pivots into that root, so
// clients on the host reach it without any other way in. Commands keep only
// a container runtime's default capabilities (less CAP_MKNOD), and the
// machine-wide parts of /proc are hidden or read-only.
//
// Memory, pids and CPU limits are cgroup v1 or v2 limits set through
// containerd/cgroups on the sandbox's own cgroups; a hybrid host such as
// one with an empty cgroup v2 hierarchy gets v1 limits and v2 per-exec
// containment. A command the memory limit kills is reported OOMKilled.
//
// As root, everything a sandbox writes outside its workspace (its layers:
// the overlay's upper and work directories, its private directories) lies
// in an ext4 image of bounded size on a loop device, mounted only in the
// sandbox's own namespaces (disk_linux.go): past the bound a write is
// ENOSPC. Rootless there is no such bound.
//
// Removing a sandbox stops its execs with the stop protocol (the Shutdown
// RPC) and ends runboxd, which ends the pid namespace and with it every
// process and mount of the sandbox; then its cgroups and state directory
// are deleted. Records live under the runbox home beside the host
// provider's (internal/procbox).
package local
