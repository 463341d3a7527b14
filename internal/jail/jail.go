// Package jail turns a freshly cloned process into the PID 1 of a runbox
// local sandbox: it builds the sandbox's root filesystem in its own mount
// namespace, opens runboxd's socket while the host's filesystem is still in
// view, and pivots into the new root.
//
// The namespaces themselves (mount, pid, uts, ipc, cgroup, and optionally
// net and user) are created by whoever starts the process, with clone flags
// (provider/local); by the time Enter runs, the process is already alone in
// them.
package jail

// Config is what a jailed runboxd is told about its sandbox. The provider
// passes it as JSON on the command line (nothing in it is secret).
type Config struct {
	// Lower is the read-only base of the root filesystem: "/" for the
	// host's root, or a root filesystem directory (--rootfs).
	Lower string `json:"lower"`
	// Upper and Work are the overlay's upper and work directories (in the
	// sandbox's state directory on the host); Merged is where the overlay
	// is mounted before the pivot.
	Upper  string `json:"upper"`
	Work   string `json:"work"`
	Merged string `json:"merged"`
	// Workspace is a host directory bind-mounted read-write at
	// WorkspacePath; "" for none.
	Workspace string `json:"workspace,omitempty"`
	// Socket is the host path of runboxd's unix socket.
	Socket string `json:"socket"`
	// Hostname is the sandbox's hostname (its UTS namespace is its own).
	Hostname string `json:"hostname"`
	// NetworkNone brings up loopback in the sandbox's own, otherwise empty,
	// network namespace.
	NetworkNone bool `json:"network_none,omitempty"`
	// Mask lists host directories that must not be visible in the sandbox
	// (the runbox home, with every sandbox's state): each gets an empty
	// read-only tmpfs over it.
	Mask []string `json:"mask,omitempty"`
	// Env is the environment commands start with (the host's is not
	// inherited).
	Env []string `json:"env"`
	// OOMControl is the host path of the sandbox's memory cgroup's
	// memory.oom_control (cgroup v1), whose oom_kill counter tells which
	// execs the memory limit killed; "" without a memory limit.
	OOMControl string `json:"oom_control,omitempty"`
	// ExecTasks are host paths of cgroup v1 tasks files of groups that
	// hold the sandbox's commands but not runboxd (its pids limit): runboxd
	// forks every exec from a thread that has joined them.
	ExecTasks []string `json:"exec_tasks,omitempty"`
	// Threads is how many OS threads runboxd makes at start and keeps,
	// where its pids limit is shared with the commands (a cgroup v2 host).
	Threads int `json:"threads,omitempty"`
}

// WorkspacePath is where the workspace appears inside the sandbox; it is the
// default working directory of every exec.
const WorkspacePath = "/workspace"

// DefaultEnv is the environment of a sandbox's commands unless the provider
// says otherwise.
var DefaultEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LANG=C.UTF-8",
}
