// Package supervisor owns every process an exec spawns inside a sandbox: it
// spawns each exec in its own process group and (where a writable cgroup v2
// hierarchy exists) straight into an empty cgroup of its own, enforces the
// exec's deadlines on the daemon's monotonic clock, stops it with the stop
// protocol (SIGTERM to every process, grace, SIGKILL, confirm none is left),
// reaps every zombie, and keeps the exec's output in bounded rings for replay.
//
// Containment has two modes. In "cgroup2" mode the child is created with
// clone3(CLONE_INTO_CGROUP), so there is no window in which a grandchild can
// be forked outside the exec's cgroup, and the cgroup's membership is the
// truth about what is alive, except that a root process can move itself out
// of it: the stop protocol (timeout, cancel, shutdown) also looks for the
// exec's markers, so such a process still dies. An exec's cgroup is new, or
// one an earlier exec left empty without ever being killed (kept for reuse,
// so a short exec costs no mkdir and rmdir); either way the exec is its only
// member from its first instruction. In "proc" mode (no writable
// cgroup v2) the daemon is a child subreaper and finds an exec's processes
// through /proc: by ancestry from the leader, and by the markers in each
// process's initial environment (RUNBOX_EXEC_ID, the exec's id, and
// RUNBOX_DAEMON, a random value of the daemon's own, so that daemons sharing
// a /proc never take each other's processes), which survive setsid, double
// forks and reparenting. A process that leaves the cgroup and also starts
// itself afresh without the markers (env -i) is beyond both.
//
// Reaping: the supervisor calls wait4(-1) for every SIGCHLD, so it reaps
// orphans re-parented to the daemon as well as its own leaders. Leaders are
// registered under a barrier that the reaper crosses before it looks a pid up,
// so an exit status is never lost to the reaper. Consequently the process
// that hosts a Supervisor must not wait for children of its own by other
// means (os/exec's Wait would race with the reaper).
//
// Output readers: only the exec's own Run stream (StartFollowing) has flow
// control, holding the command's writes back rather than drop what it has
// not read. Every other reader (Exec.Output: attach, an Output iterator) is
// an observer that never holds the command back: when it falls behind the
// ring it loses its place and sees a Gap counting the bytes it missed.
//
// Locking: an Exec's fields each say what guards them. Its containment is
// made before the exec is published in the supervisor's map, so List,
// Signal and Shutdown read it while the spawn runs.
//
// The package does not speak any RPC: internal/daemon adapts it to the API.
package supervisor

import "time"

// Timing and size knobs. Each value is a default a request or a daemon flag
// may override where noted.
const (
	// DefaultRetention is how long an exited exec (with its result and
	// output ring) and a cancel tombstone are kept: long enough for a client
	// to re-attach after a dropped connection or a laptop sleep.
	DefaultRetention = 10 * time.Minute
	// tombstoneRetention is the least time a cancel tombstone is kept, even
	// when exited execs are forgotten sooner: a Run delayed by a loaded
	// network or machine must still be refused, and tombstones are tiny.
	tombstoneRetention = 10 * time.Minute
	// DefaultRingBytes bounds the replay ring of each output stream.
	DefaultRingBytes = 1 << 20
	// DefaultRetainedOutputBytes bounds the replay rings of exited execs,
	// all together: past it the oldest exited execs' rings are let go (a
	// replay of them starts with a Gap; their Results keep head and tail).
	// Without it a busy sandbox held up to two rings per exec of the whole
	// retention window: a soak of 4,000 commands grew runboxd to 1.6 GiB.
	DefaultRetainedOutputBytes = 64 << 20
	// DefaultRetainedResultBytes bounds what exited execs keep besides
	// their rings, all together: each Result's head and tail, the stdin
	// its spec carried, and execOverhead for the exec itself. Past it the
	// oldest exited execs are forgotten before their retention ends (a
	// later Attach or Wait of one gets runbox.ErrExecNotFound, as past the
	// retention). Without it runboxd grew with the retention window: 1.3
	// GiB after 30,000 soak commands, a quarter of them 10 MB floods whose
	// Results kept 64 KiB each. 32 MiB keeps the last 500 such Results, or
	// about 4,000 of quick commands'.
	DefaultRetainedResultBytes = 32 << 20
	// execOverhead is what an exited exec is counted for beyond its
	// Result's bytes: its structures, channels, output store and spec
	// measured about 5.5 KiB each for `echo hi` (HeapAlloc over 300
	// retained execs); counted as 8 KiB.
	execOverhead = 8 << 10
	// DefaultDrain bounds how long output is still read after the leader
	// exits, so a background child holding the pipe never hangs the call.
	DefaultDrain = 200 * time.Millisecond
	// DefaultHeadBytes and DefaultTailBytes are what a Result keeps of each
	// stream when the request does not say.
	DefaultHeadBytes = 32 << 10
	DefaultTailBytes = 32 << 10

	// killConfirmTimeout bounds the wait for SIGKILLed processes to vanish;
	// only a process in uninterruptible sleep outlives it.
	killConfirmTimeout = 3 * time.Second
	// stopPollInterval is how often the stop protocol re-checks what is alive
	// (and signals processes forked since the last look), for its first
	// stopFastPolls looks; then the interval doubles up to 50 ms. (It was
	// 5 ms doubling at once: a tree gone in 6 ms was seen gone at 15 ms.)
	stopPollInterval = time.Millisecond
	stopFastPolls    = 20
	// firstHangupRepeat is when the stop protocol hangs a terminal's
	// command up again if it is still there; each repeat comes twice as
	// long after the one before. A shell's line editor checks for a
	// caught signal and then blocks reading the terminal: a hangup that
	// lands between the two is caught but not acted on until the next
	// signal (readline), and a terminal that was really closed would end
	// that read; runboxd's stays open for the output.
	firstHangupRepeat = 100 * time.Millisecond
	// escapeeRescanInterval is how often, at most, the stop protocol
	// searches /proc for processes that left the exec's cgroup while the
	// cgroup still has members (it always searches on a phase's first
	// look and once the cgroup is empty). A search reads every process's
	// /proc entry.
	escapeeRescanInterval = 50 * time.Millisecond
	// releaseRetryInterval spaces the retries of removing an exec's
	// cgroup that the kernel still reports busy (up to 100 of them).
	releaseRetryInterval = 5 * time.Millisecond
	// drainSlackBytes is how far beyond its limit a replay ring may grow,
	// after the leader exits, to keep output a connected client has not
	// read yet (see outputStore.draining). Without background writers the
	// drain reads at most a pipe's buffer, far less than this.
	drainSlackBytes = 8 << 20
	// readChunkSize is the largest output chunk read at once: a quarter of
	// a default replay ring, so a connected client's flow control still
	// overlaps reading with sending (docs/performance.md measures it).
	readChunkSize = 256 << 10
	// minReadSpace is the least room a pipe read is given: with less left
	// in its buffer, the stream's reader takes a fresh one (see
	// Exec.readStream).
	minReadSpace = readChunkSize / 4
	// outputPipeBytes is the size asked for each output pipe (the kernel's
	// default is 64 KiB; fs.pipe-max-size is 1 MiB unless raised).
	outputPipeBytes = 256 << 10
	// spillQueueChunks bounds how many chunks a stream's spill writer may
	// lag behind its reader (2 MiB of full reads) before the reader, and so
	// the command, waits for the disk.
	spillQueueChunks = 8
	// liveCatchUp bounds how long a SpillUnsent exec's end waits for its
	// live stream to send the output read before the command's end; what
	// it has not sent by then is spilled (and still streamed).
	liveCatchUp = 2 * time.Second
	// maxIDLength bounds caller-chosen exec ids.
	maxIDLength = 128
)
