package runbox

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Stream names one of an exec's output streams.
type Stream int

const (
	// StreamUnspecified is the zero Stream; it never appears in output.
	StreamUnspecified Stream = iota
	// Stdout is the exec's standard output.
	Stdout
	// Stderr is the exec's standard error.
	Stderr
)

// String returns "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "unspecified"
}

// ExecState is where an exec is in its life: starting → running → stopping →
// exited. Transitions only go forward.
type ExecState int

const (
	// ExecStateUnspecified is the zero ExecState.
	ExecStateUnspecified ExecState = iota
	// ExecStarting means the process is being spawned.
	ExecStarting
	// ExecRunning means the leader process is alive.
	ExecRunning
	// ExecStopping means the stop protocol (TERM, grace, KILL) is under way.
	ExecStopping
	// ExecExited means the leader has exited and its status is known.
	ExecExited
)

// String returns the state's lower-case name.
func (s ExecState) String() string {
	switch s {
	case ExecStarting:
		return "starting"
	case ExecRunning:
		return "running"
	case ExecStopping:
		return "stopping"
	case ExecExited:
		return "exited"
	}
	return "unspecified"
}

// ExecSpec describes one command to run in a sandbox.
//
// Exactly one of Command (a shell string, run by bash -c, or sh -c where bash
// is absent) and Argv (run directly, looked up in PATH) must be set.
//
// Command, Argv, Env and Cwd are bytes: any sequence without a NUL byte
// works, UTF-8 or not, and reaches the command exactly. Their sizes are
// bounded (see MaxCommandBytes and CheckInput).
type ExecSpec struct {
	// ID names the exec. Empty means the daemon generates one. The ID is an
	// idempotency key: running the same spec with an ID that already exists
	// attaches to that exec instead of starting it again, so a retried
	// request runs the command exactly once; a different spec with that ID
	// is refused with ErrExecIDConflict.
	ID string
	// Command is a shell string.
	Command string
	// Argv is a program and its arguments, run without a shell.
	Argv []string
	// Login runs the shell as a login shell (bash -l).
	Login bool
	// Env adds or overrides environment variables.
	Env map[string]string
	// Cwd is the working directory; empty means the session's, or the
	// daemon's default.
	Cwd string
	// Session names a shell session: the exec starts in the session's
	// working directory with its exported environment (and, under bash, its
	// functions and aliases), and a normal exit saves them back. Timed-out
	// or cancelled execs leave the session unchanged.
	Session string
	// Stdin is given to the command, then its stdin is closed. With neither
	// Stdin nor StdinStream, stdin is /dev/null, so `cat` never hangs.
	Stdin []byte
	// StdinStream keeps stdin open after Stdin for later writes until closed.
	StdinStream bool
	// Timeout bounds the exec's run time; zero means no limit. The daemon
	// enforces it on its own monotonic clock.
	Timeout time.Duration
	// IdleTimeout stops the exec after this long without output; zero means
	// no limit.
	IdleTimeout time.Duration
	// Grace is how long stopped processes get between SIGTERM and SIGKILL;
	// zero means DefaultGrace, and a negative Grace (NoGrace) none: the stop
	// protocol sends SIGKILL at once.
	Grace time.Duration
	// HeadBytes and TailBytes bound how much of each stream the Result keeps
	// (its first and last bytes); zero means the defaults.
	HeadBytes, TailBytes int
	// Spill says when the full output of a stream is also written to a file
	// in the sandbox, so the part left out of the Result stays readable.
	Spill SpillMode
	// PTY, when set, runs the command on a pseudo-terminal of this size:
	// stdin, stdout and stderr are the terminal, all output arrives as
	// Stdout, and the exec's stdin is the terminal's input.
	PTY *PTYSize
	// CancelOnDisconnect stops the exec with the stop protocol when every
	// client stream following it has closed before delivering its Result
	// (the caller died, or gave up), unless one reconnects within a short
	// linger. Without it a dropped connection never stops an exec.
	CancelOnDisconnect bool
	// KillLeftovers stops, with the stop protocol, what the command left
	// running in the background once its leader exits by itself; the
	// Result comes after they are gone and counts them in Killed. Without
	// it background processes run on (see Result.LeftRunning).
	KillLeftovers bool
}

// PTYSize is a terminal size in character cells.
type PTYSize struct {
	Rows, Cols uint16
}

// SpillMode says when an exec's full output is written to a spill file.
type SpillMode int

const (
	// SpillAuto (the default) spills a stream once it outgrows the
	// Result's head and tail.
	SpillAuto SpillMode = iota
	// SpillAlways spills every stream that produces output.
	SpillAlways
	// SpillNever keeps only the head and tail.
	SpillNever
	// SpillUnsent is for a caller that streams the output (a Run that
	// streams it live): nothing is written to disk while every byte reaches
	// that stream. From the first byte the stream misses (the replay ring
	// let it go before the stream sent it, the stream disconnected, or it
	// had not sent everything shortly after the command's output ended),
	// each stream is spilled from that byte to its end, and
	// Result.StdoutSpillOffset/StderrSpillOffset say where the file
	// starts. Without a live stream it is SpillAuto.
	SpillUnsent
)

// DefaultGrace is the time between SIGTERM and SIGKILL when a spec gives none.
const DefaultGrace = 5 * time.Second

// NoGrace, as a grace period (ExecSpec.Grace, a cancel's grace), means none:
// the stop protocol sends SIGKILL at once. Any negative grace means the same.
const NoGrace time.Duration = -1

// Result is how an exec ended.
type Result struct {
	// ID is the exec's id.
	ID string
	// ExitCode is the shell's own status, or 128+N when killed by signal N.
	ExitCode int
	// Signal names the signal that killed the leader ("TERM", "KILL"), if any.
	Signal string
	// TimedOut, Cancelled and IdleTimedOut say why the exec was stopped.
	TimedOut, Cancelled, IdleTimedOut bool
	// OOMKilled says the sandbox's memory limit killed a process of this
	// exec (the kernel's OOM killer, not runbox, sent the SIGKILL).
	OOMKilled bool
	// Duration is the leader's run time, on the daemon's clock.
	Duration time.Duration
	// Stdout and Stderr hold each stream's head and tail. When a stream
	// exceeded HeadBytes+TailBytes, the middle is left out and counted in
	// StdoutDropped/StderrDropped.
	Stdout, Stderr []byte
	// StdoutDropped and StderrDropped count bytes left out of Stdout/Stderr.
	StdoutDropped, StderrDropped int64
	// StdoutBytes and StderrBytes count every byte each stream produced.
	StdoutBytes, StderrBytes int64
	// StdoutSpill and StderrSpill are paths, in the sandbox, of files holding
	// the stream's full output (see ExecSpec.Spill). SpillTruncated says the
	// daemon's spill budget ran out before the output did.
	StdoutSpill, StderrSpill string
	SpillTruncated           bool
	// StdoutSpillOffset and StderrSpillOffset are the stream offsets of the
	// first byte of each spill file: 0 unless ExecSpec.Spill is SpillUnsent,
	// whose spill starts at the first byte the live stream missed.
	StdoutSpillOffset, StderrSpillOffset int64
	// Killed counts the processes the stop protocol signalled.
	Killed int
	// Survivors counts processes still alive after the stop protocol gave up;
	// it is zero unless something escaped SIGKILL (e.g. uninterruptible sleep).
	Survivors int
	// LeftRunning counts the processes the exec left running in the
	// background when its Result was made (a server it started, a
	// forgotten "&"). They run on until they exit, the exec is cancelled,
	// or the sandbox ends; ExecSpec.KillLeftovers stops them at once.
	LeftRunning int
	// Pid is the leader's pid inside the sandbox (for information only).
	Pid int
	// Cwd is the session's working directory after the exec (session
	// execs only).
	Cwd string
	// CwdFallbackFrom is set when the session's saved directory no longer
	// existed: the exec started in its nearest existing parent instead.
	CwdFallbackFrom string
	// StreamGaps and StreamLost are set by the client, not the daemon, for
	// a call that streamed output (WithStdout, WithStderr, WithOnChunk): the
	// number of gaps in what was streamed and the bytes they held. A gap
	// means the daemon's replay ring had moved past output the stream had
	// not received, which happens only when the client was disconnected (or
	// attached late) for longer than the ring holds; a connected client
	// holds the command's output until it has read it. Stdout/Stderr and
	// the spill files are not affected.
	StreamGaps int   `wire:"-"`
	StreamLost int64 `wire:"-"`
}

// OutputGap is a gap in streamed output: the chunks with sequence numbers
// in [FromSeq, ToSeq) were no longer in the daemon's replay ring when the
// stream reached them. Bytes counts the bytes lost where the stream knows
// its position (it does not when it started at a sequence number after 1).
// It is an error so that an output sequence can yield it; errors.Is(err,
// ErrOutputLost) matches it.
type OutputGap struct {
	FromSeq, ToSeq uint64
	Bytes          int64
}

// Error describes the gap.
func (g *OutputGap) Error() string {
	return fmt.Sprintf("%v: chunks %d to %d (%d bytes) left the replay ring before the stream read them",
		ErrOutputLost, g.FromSeq, g.ToSeq-1, g.Bytes)
}

// Is makes errors.Is(g, ErrOutputLost) true.
func (g *OutputGap) Is(target error) bool { return target == ErrOutputLost }

// SessionInfo describes a shell session kept by runboxd.
type SessionInfo struct {
	Name string
	// Cwd is the session's working directory.
	Cwd string
	// EnvVars counts the session's exported variables.
	EnvVars int
	// Execs counts the execs run in the session.
	Execs int
}

// OK reports whether the exec exited with status 0 by itself.
func (r Result) OK() bool {
	return r.ExitCode == 0 && !r.TimedOut && !r.Cancelled && !r.IdleTimedOut
}

// ExecInfo describes an exec the daemon knows about.
type ExecInfo struct {
	ID        string
	Pid       int
	State     ExecState
	Command   string
	StartedAt time.Time
	// Result is set once State is ExecExited.
	Result *Result
	// LiveProcesses counts the exec's processes still alive (background
	// children keep an exited exec's count above zero).
	LiveProcesses int
}

// Chunk is a piece of an exec's output. Seq orders chunks across both
// streams: the merged order is the order runboxd read them.
type Chunk struct {
	Stream Stream
	Seq    uint64
	Data   []byte
}

// DaemonInfo describes a running runboxd.
type DaemonInfo struct {
	Version string
	Pid     int
	// CgroupMode is "cgroup2" when each exec gets its own cgroup, or
	// "proc" when descendants are tracked through /proc as a subreaper.
	CgroupMode string
	// Running counts execs whose leader is alive; Retained counts exited execs
	// still kept for attach; Total counts execs started since the daemon began.
	Running, Retained int
	Total             uint64
	StartedAt         time.Time
	// Goroutines and OpenFDs are the daemon's own counts, for leak checks.
	Goroutines, OpenFDs int
	// Paused says the sandbox's user paused it (Pause, until Resume): its
	// commands are frozen and their deadlines stopped until it is resumed.
	Paused bool
	// Holds counts the holds that stand (a snapshot copying the sandbox
	// holds it): the commands are frozen while Paused is set or Holds is
	// above zero, and a Resume while a hold stands thaws them only once
	// the last hold ends.
	Holds int
}

// SandboxSpec describes a sandbox to create.
type SandboxSpec struct {
	// Name is an optional unique alias.
	Name string
	// Image is the root filesystem image, for providers that use one.
	Image string
	// Rootfs is a root filesystem directory on this machine (a debootstrap
	// tree, an unpacked image), for the local provider; empty means the
	// host's own root, read-only under a writable overlay.
	Rootfs string
	// UserNS is kept for compatibility: the local provider now always runs
	// a sandbox in a user namespace (see HostRoot).
	UserNS bool
	// HostRoot makes a local sandbox's root the host's root, as before
	// runbox mapped it to an unprivileged host uid range: weaker (a
	// command that escapes the sandbox's view is host root), for what cannot
	// run mapped. Only root can ask for it.
	HostRoot bool
	// Workdir is a host directory made available in the sandbox.
	Workdir string
	// Memory (bytes), Pids and CPUs are resource limits; zero means none.
	// Pids counts the commands' processes and threads, not runboxd's;
	// Memory, where the provider can, is the commands' alone too.
	Memory int64
	Pids   int64
	CPUs   float64
	// Disk (bytes) bounds what the sandbox may write to disk outside its
	// workspace (a local sandbox's overlay and private directories, a
	// docker container's writable layer, a pod's ephemeral storage); zero
	// means the provider's default (none where the provider has none).
	Disk int64
	// Network is "none", "host" or "private" (provider dependent); empty is the
	// provider's default.
	Network string
	// DaemonArgs are extra flags for runboxd serve (e.g. "--cgroup=off").
	DaemonArgs []string
	// FromSnapshot names a snapshot (see Snapshotter) the sandbox starts
	// from: its filesystem under the sandbox's own writable layer, and its
	// workspace copy as the sandbox's workspace unless Workdir is set.
	FromSnapshot string
	// Egress is what the commands of a sandbox on the "private" network may
	// reach through its egress proxy; the zero value reaches nothing.
	Egress EgressPolicy
}

// EgressPolicy is the allowlist of a private-network sandbox, decided on
// the host side by the name a command asks for (docs/security.md).
type EgressPolicy struct {
	// Allow lists names: "example.com", "*.example.com" (names under it),
	// or "*" (every name).
	Allow []string `json:"allow,omitempty"`
	// AllowCIDR lists address ranges that may be dialled although they are
	// not public (loopback, private, link-local, metadata), and that may
	// be asked for by address.
	AllowCIDR []string `json:"allow_cidr,omitempty"`
	// Deny lists names (as Allow) and address ranges refused whatever
	// Allow says.
	Deny []string `json:"deny,omitempty"`
	// Resolve pins names to addresses on the host side, as curl --resolve.
	Resolve map[string]string `json:"resolve,omitempty"`
}

// Empty reports whether the policy has no rule.
func (p EgressPolicy) Empty() bool {
	return len(p.Allow) == 0 && len(p.AllowCIDR) == 0 && len(p.Deny) == 0 && len(p.Resolve) == 0
}

// Sandbox is a sandbox as its provider records it.
type Sandbox struct {
	ID       string
	Name     string
	Provider string
	Created  time.Time
	// Alive reports whether runboxd answered when the sandbox was looked up.
	Alive bool
	// Detail holds provider-specific facts (pid, container id, socket path;
	// "lost": why a sandbox that is not Alive is lost, where the provider knows).
	Detail map[string]string
}

// Dialer opens a fresh byte stream to a sandbox's runboxd. The client calls it
// again whenever a stream breaks.
type Dialer func(ctx context.Context) (net.Conn, error)

// Provider creates, finds and destroys sandboxes, and opens streams to them.
type Provider interface {
	// Name is the provider's name as the CLI spells it ("host", "docker").
	Name() string
	// Create makes a sandbox and returns once its runboxd answers.
	Create(ctx context.Context, spec SandboxSpec) (Sandbox, error)
	// Get finds a sandbox by id or name; ErrSandboxNotFound when none matches.
	Get(ctx context.Context, idOrName string) (Sandbox, error)
	// List returns every sandbox this provider knows of.
	List(ctx context.Context) ([]Sandbox, error)
	// Dialer returns how to reach the sandbox's runboxd.
	Dialer(sb Sandbox) Dialer
	// Remove stops every exec through the stop protocol and destroys the
	// sandbox. With force, it also removes sandboxes whose runboxd is gone.
	Remove(ctx context.Context, sb Sandbox, force bool) error
}
