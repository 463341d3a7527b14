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
	// LowerTree says the provider sent, with the configuration, a detached
	// id-mapped mount of Lower's own filesystem (first of the descriptors
	// sent), to be the overlay's lower layer: host uid N's files are then
	// sandbox uid N's, though sandbox root is an unprivileged host uid.
	LowerTree   bool `json:"lower_tree,omitempty"`
	LowerTreeFD int  `json:"-"`
	// FuseRoot says the root is a FUSE overlay of Lower served from
	// outside the sandbox (provider/local runs fuse-overlayfs as an
	// unprivileged host uid, so the host's files are read with a
	// stranger's rights): the jail opens the FUSE device the provider
	// made at FuseDevice in the layers (LayersTree is then set), mounts
	// it at Merged, and sends the open device back on ReplyFD for the
	// provider to hand to the server. Upper and Work are then the
	// server's business, not the jail's.
	FuseRoot bool `json:"fuse_root,omitempty"`
	// ReplyFD is the configuration socket, kept open where the jail has
	// something to send back (FuseRoot); never part of the JSON.
	ReplyFD int `json:"-"`
	// LayersTree says the provider sent, first of the descriptors, a
	// detached mount of the sandbox's layers directory, to be attached at
	// LayersPath: the directories above it on the host are closed to a
	// mapped root, and a path through a descriptor opened in the host's
	// mount namespace cannot be mounted on. Upper, Work, Merged and
	// PrivateDir then lie under LayersPath.
	LayersTree   bool `json:"layers_tree,omitempty"`
	LayersTreeFD int  `json:"-"`
	// Upper and Work are the overlay's upper and work directories (in the
	// sandbox's state directory on the host); Merged is where the overlay
	// is mounted before the pivot.
	Upper  string `json:"upper"`
	Work   string `json:"work"`
	Merged string `json:"merged"`
	// Workspace is a host directory bind-mounted read-write at
	// WorkspacePath; "" for none.
	Workspace string `json:"workspace,omitempty"`
	// WorkspaceTree says the provider sent, with the configuration, a
	// detached mount of Workspace (open_tree) already id-mapped to the
	// sandbox's user namespace: it is attached at WorkspacePath instead of
	// a plain bind, so sandbox uid N owns what host uid N owns there.
	WorkspaceTree bool `json:"workspace_tree,omitempty"`
	// WorkspaceTreeFD is that mount's descriptor in this process, once
	// received (never part of the JSON).
	WorkspaceTreeFD int `json:"-"`
	// WorkspaceDev and WorkspaceIno, when not 0, are the device and inode
	// of the directory the provider checked as the workspace: a plain bind
	// binds Workspace only if its path, opened here with no link followed,
	// is still that directory (a swap after the check is refused).
	WorkspaceDev uint64 `json:"workspace_dev,omitempty"`
	WorkspaceIno uint64 `json:"workspace_ino,omitempty"`
	// workspaceFD, set by Enter, is an O_PATH handle of Workspace opened
	// before Scratch is covered; a plain bind of the workspace uses it.
	workspaceFD int
	// Socket is the host path of runboxd's unix socket.
	Socket string `json:"socket"`
	// ListenerFD, when not 0, is an inherited descriptor of the API socket
	// already listening (made by the provider, which can write where a
	// sandbox's mapped root cannot); Socket is then only informative.
	ListenerFD int `json:"listener_fd,omitempty"`
	// CloseFDs are inherited descriptors runboxd closes at once (the
	// binary it was executed through).
	CloseFDs []int `json:"close_fds,omitempty"`
	// UserNS says runboxd runs in a user namespace of its own: it then
	// caps the namespace's count of nested user namespaces at zero, so no
	// command can make one (and with it a mount namespace it owns).
	UserNS bool `json:"userns,omitempty"`
	// Hostname is the sandbox's hostname (its UTS namespace is its own).
	Hostname string `json:"hostname"`
	// NetworkNone brings up loopback in the sandbox's own, otherwise empty,
	// network namespace.
	NetworkNone bool `json:"network_none,omitempty"`
	// Egress, with NetworkNone, makes runboxd offer its egress proxy on
	// the sandbox's loopback (internal/egress), carried by the host side.
	Egress bool `json:"egress,omitempty"`
	// Mask lists host directories that must not be visible in the sandbox
	// (the runbox home, with every sandbox's state): each gets an empty
	// read-only tmpfs over it, at its own path and, when it lies inside
	// Workspace, at its path under WorkspacePath too.
	Mask []string `json:"mask,omitempty"`
	// MaskFiles lists host files the sandbox must not read (SSH host
	// keys): each gets an empty read-only file over it.
	MaskFiles []string `json:"mask_files,omitempty"`
	// Private lists host directories replaced in the sandbox by an empty
	// directory of its own, on disk under PrivateDir, owned by the
	// sandbox's root and writable (/root, /home: the host's are not the
	// sandbox's business, but its root needs a home).
	Private    []string `json:"private,omitempty"`
	PrivateDir string   `json:"private_dir,omitempty"`
	// Direct lists directories of the sandbox's root, made if absent,
	// that are directories of its own under PrivateDir too, so what is
	// written there goes straight to disk rather than through a FuseRoot's
	// server (runboxd's spill files).
	Direct []string `json:"direct,omitempty"`
	// Fresh lists directories that get a fresh, empty, writable tmpfs
	// (/run: the host's holds its daemons' sockets).
	Fresh []string `json:"fresh,omitempty"`
	// TmpSize, when not 0, is the size in bytes of the sandbox's /tmp
	// tmpfs (/dev/shm has 64 MiB): the local provider's bound on it (its
	// pages count against the memory cgroup too). 0 leaves it unbounded.
	TmpSize int64 `json:"tmp_size,omitempty"`
	// Env is the environment commands start with (the host's is not
	// inherited).
	Env []string `json:"env"`
	// OOMControl is the host path of the sandbox's memory cgroup's
	// memory.oom_control (cgroup v1), whose oom_kill counter tells which
	// execs the memory limit killed; "" without a memory limit.
	OOMControl string `json:"oom_control,omitempty"`
	// FuseServerOOMControl is the host path of the oom_kill counter
	// (memory.oom_control, or memory.events on cgroup v2) of the cgroup
	// of a FuseRoot's server, whose memory limit is the sandbox's: runboxd
	// reads it to say why the root is gone when the server is. "" without
	// a memory limit.
	FuseServerOOMControl string `json:"fuse_server_oom_control,omitempty"`
	// ExecTasks are host paths of cgroup v1 tasks files of groups that
	// hold the sandbox's commands but not runboxd (its pids limit): runboxd
	// forks every exec from a thread that has joined them.
	ExecTasks []string `json:"exec_tasks,omitempty"`
	// Threads is how many OS threads runboxd makes at start and keeps,
	// where its pids limit is shared with the commands (a cgroup v2 host).
	Threads int `json:"threads,omitempty"`
	// AuthSHA256 is the SHA-256 (hex) of the sandbox's secret: runboxd
	// serves only connections that start with the secret
	// (internal/daemonauth), and refuses to start without it.
	AuthSHA256 string `json:"auth_sha256"`
}

// Scratch is the directory of runboxd's mount namespace that gets a
// private tmpfs before anything else is mounted, to attach what the
// provider sent (LayersPath, the lower tree); it vanishes with the pivot.
const Scratch = "/tmp"

// LayersPath is where a LayersTree is attached.
const LayersPath = Scratch + "/layers"

// FuseDevice is the name, in the layers directory, of the FUSE device
// node the provider makes for a FuseRoot (owned by the sandbox's root, so
// the jail may open it from inside its user namespace, as the kernel
// wants of a FUSE mount there); the jail removes it once open.
const FuseDevice = "fuse"

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
