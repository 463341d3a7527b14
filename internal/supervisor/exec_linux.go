package supervisor

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// stopReason says why the stop protocol ran, for the Result's flags.
type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopIdle
	stopCancel
	// stopDisconnect is a cancel because every client following the exec
	// left (CancelOnDisconnect). Unlike a cancel, it leaves an exec that
	// has already exited, and what that exec left running, alone.
	stopDisconnect
)

// Exec is one command the supervisor runs. Its state only moves forward:
// starting → running → stopping → exited.
//
// Each field says what guards it. "Fixed" fields are set before the exec
// is published in the supervisor's map and never written again: any
// goroutine may read them. "spawn" fields are written by spawn before it
// starts supervise, and read only by supervise and what it starts (the
// go statement orders them).
type Exec struct {
	s     *Supervisor     // fixed
	id    string          // fixed
	n     uint64          // fixed: the supervisor's sequence number for this exec
	spec  runbox.ExecSpec // fixed
	grace time.Duration   // fixed
	out   *outputStore    // fixed; guarded by its own lock
	// digest identifies spec: a Start with this id and another spec is
	// refused (see specDigest). Fixed.
	digest specDigest

	done       chan struct{}        // fixed: closed when the Result is final
	leaderGone chan struct{}        // fixed: closed when the leader has been reaped
	exitCh     chan unix.WaitStatus // fixed: the reaper's delivery of the leader's status
	stopCh     chan struct{}        // fixed: closed (under mu) on the first stop request
	stopMu     sync.Mutex           // one stop protocol at a time
	stdinMu    sync.Mutex           // serialises stdin writes and close
	stdin      *os.File             // stdinMu: nil unless stdin is a pipe or pty we still hold
	pty        *os.File             // stdinMu (spawn); the pty master when the exec runs on a pty
	stdinFeed  sync.WaitGroup       // the goroutine writing spec.Stdin
	signalled  map[int]struct{}     // stopMu: pids the stop protocol signalled
	cont       containment          // fixed; guarded by its own lock
	escapees   *procTracker         // fixed (nil in proc mode): finds by marker the processes that left the cgroup
	session    *sessionSnapshot     // spawn: the session state the exec started from
	spills     [2]*spillFile        // written only by the stream's reader
	dir        string               // spawn: the working directory it was spawned in
	followers  followers            // its own lock: client streams following it (CancelOnDisconnect)

	mu      sync.Mutex // guards the fields below
	state   runbox.ExecState
	pid     int
	started time.Time
	// activeStart is the pause clock's time at started: the deadline
	// counts from it.
	activeStart time.Duration
	// oomKillsAtStart is Config.OOMKills when the exec started (spawn).
	oomKillsAtStart uint64
	ended           time.Time
	reason          stopReason
	stopGrace       time.Duration
	released        bool // containment released
	survivors       int
	result          runbox.Result
	// bgStops counts stops of background processes running after the
	// exec ended (see requestStop); bgIdle is closed when it falls to 0.
	bgStops int
	bgIdle  chan struct{}
}

func newExec(s *Supervisor, spec runbox.ExecSpec, n uint64, cont containment, escapees *procTracker) *Exec {
	head, tail := spec.HeadBytes, spec.TailBytes
	if head == 0 {
		head = DefaultHeadBytes
	}
	if tail == 0 {
		tail = DefaultTailBytes
	}
	grace := spec.Grace
	switch {
	case grace == 0:
		grace = runbox.DefaultGrace
	case grace < 0: // runbox.NoGrace: SIGKILL at once
		grace = 0
	}
	out := newOutputStore(s.cfg.RingBytes, head, tail, spec.Spill)
	out.clock = s.pause
	out.lastOutput = s.pause.now()
	return &Exec{
		s: s, id: spec.ID, n: n, spec: spec, grace: grace, cont: cont, escapees: escapees,
		out:        out,
		done:       make(chan struct{}),
		leaderGone: make(chan struct{}),
		exitCh:     make(chan unix.WaitStatus, 1),
		stopCh:     make(chan struct{}),
		signalled:  make(map[int]struct{}),
		state:      runbox.ExecStarting,
		started:    time.Now(),
	}
}

// ID returns the exec's id.
func (e *Exec) ID() string { return e.id }

// Pid returns the leader's pid, or 0 before it is spawned.
func (e *Exec) Pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pid
}

// Done is closed when the exec's Result is final: the leader has exited, its
// output has been drained, and any stop protocol has finished.
func (e *Exec) Done() <-chan struct{} { return e.done }

// Result returns how the exec ended; it is complete once Done is closed.
func (e *Exec) Result() runbox.Result {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.result
}

// Output returns an observer of the exec's output from sequence number
// from: the command never waits for it, and it sees a Gap for what the
// ring let go before it read it (see [OutputReader]).
func (e *Exec) Output(from uint64) *OutputReader { return e.out.reader(from) }

func (e *Exec) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *Exec) finishedAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended
}

func (e *Exec) command() string {
	if e.spec.Command != "" {
		return e.spec.Command
	}
	return strings.Join(e.spec.Argv, " ")
}

// Info describes the exec.
func (e *Exec) Info() runbox.ExecInfo {
	live := 0
	e.mu.Lock()
	released := e.released
	e.mu.Unlock()
	if !released {
		live = len(e.cont.pids())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	info := runbox.ExecInfo{
		ID: e.id, Pid: e.pid, State: e.state, Command: e.command(),
		StartedAt: e.started, LiveProcesses: live,
	}
	if e.finished() {
		r := e.result
		info.Result = &r
	}
	return info
}

// WriteStdin writes p to the exec's stdin, which must have been opened as a
// stream (ExecSpec.StdinStream).
func (e *Exec) WriteStdin(p []byte) error {
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if e.stdin == nil {
		return notRunningStdin(e.id)
	}
	if _, err := e.stdin.Write(p); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
			return notRunningStdin(e.id)
		}
		return err
	}
	return nil
}

func notRunningStdin(id string) error {
	return &runbox.Error{Op: "write stdin", Exec: id, Err: runbox.ErrNotRunning}
}

// CloseStdin closes the exec's stdin; the command sees EOF. Closing twice is
// not an error. On a pty it writes the end-of-file character (^D) instead,
// since the terminal stays open.
func (e *Exec) CloseStdin() error {
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if e.stdin == nil {
		return nil
	}
	if e.pty != nil {
		if _, err := e.stdin.Write([]byte{ptyEOF}); err != nil {
			if errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed) {
				return notRunningStdin(e.id)
			}
			return err
		}
		return nil
	}
	e.stdin.Close()
	e.stdin = nil
	return nil
}

// dropStdin lets go of the exec's stdin once it has ended: a pipe is closed
// (unblocking the stdin feeder if nothing reads); a pty master is closed by
// the output reader's owner.
func (e *Exec) dropStdin() {
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if e.stdin != nil && e.pty == nil {
		e.stdin.Close()
	}
	e.stdin = nil
}

// leaderExited is called by the reaper with the leader's wait status.
func (e *Exec) leaderExited(ws unix.WaitStatus) { e.exitCh <- ws }

// spawnFailed ends an exec whose leader could not be started.
func (e *Exec) spawnFailed(err error) {
	e.mu.Lock()
	if !e.released {
		e.cont.release()
	}
	e.state = runbox.ExecExited
	e.ended = time.Now()
	e.released = true
	e.result = runbox.Result{ID: e.id, ExitCode: -1}
	e.mu.Unlock()
	close(e.leaderGone)
	close(e.done)
}

// releaseIfEmpty frees the containment once no process of the exec is left,
// and reports whether it is free.
func (e *Exec) releaseIfEmpty() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released {
		return true
	}
	if !e.cont.empty() {
		return false
	}
	e.cont.release()
	e.released = true
	return true
}

// leftRunning counts the exec's processes still alive after its leader
// exited, and frees the containment when there are none.
func (e *Exec) leftRunning() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released {
		return 0
	}
	if !e.cont.empty() {
		return len(e.cont.pids())
	}
	e.cont.release()
	e.released = true
	return 0
}

// releaseContainment frees the containment unconditionally (at shutdown,
// after the stop protocol).
func (e *Exec) releaseContainment() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.released {
		e.cont.release()
		e.released = true
	}
}

// oomKilled reports whether the leader's end looks like the memory limit's
// doing: killed by SIGKILL (or a shell reporting a child's SIGKILL as 137)
// while the sandbox's OOM kill counter rose.
func (e *Exec) oomKilled(ws unix.WaitStatus) bool {
	if e.s.cfg.OOMKills == nil {
		return false
	}
	killed := (ws.Signaled() && ws.Signal() == unix.SIGKILL) || (ws.Exited() && ws.ExitStatus() == 128+int(unix.SIGKILL))
	if !killed {
		return false
	}
	now, err := e.s.cfg.OOMKills()
	return err == nil && now > e.oomKillsAtStart
}

// readStateRecord reads a session state record until its trailer, EOF, the
// size bound, or the drain deadline.
func readStateRecord(f *os.File) []byte {
	var rec []byte
	buf := make([]byte, 4096)
	for len(rec) < maxStateBytes {
		n, err := f.Read(buf)
		rec = append(rec, buf[:n]...)
		if bytes.HasSuffix(rec, []byte(stateTrailer)) || err != nil {
			break
		}
	}
	return rec
}

// readStream reads one output stream into the exec's output store (and its
// spill file) until EOF. Each read goes into the free end of a pooled
// buffer (see outBuf) and the chunk is that part of it, shared with the
// store (no copy): the next read goes behind it, into the same buffer, and
// only once less than minReadSpace is left does the reader take a fresh
// buffer. So short reads (a command faster than the pipe's reader, or a
// trickle of small writes) neither copy nor allocate, and pin at most one
// buffer more than the bytes the store keeps.
func (e *Exec) readStream(f *os.File, s runbox.Stream) {
	defer e.out.closeStream()
	ob := getOutBuf()
	defer func() { ob.release() }()
	i := streamIndex(s)
	// The spill file is written by a goroutine of its own, so the disk's
	// writes overlap the pipe's reads; the queue bounds how far it may lag
	// (chunks are never modified while held, so it shares them, holding a
	// reference to each until written).
	var spill chan chunkData
	var spilled sync.WaitGroup
	defer func() {
		if spill != nil {
			close(spill)
			spilled.Wait()
		}
	}()
	late := 0 // bytes read after the drain deadline (see readAvailable)
	used := 0 // bytes of ob.data handed to the store
	for {
		if len(ob.data)-used < minReadSpace {
			ob.release() // the chunks in it hold their own references
			ob, used = getOutBuf(), 0
		}
		buf := ob.data[used:]
		n, err := f.Read(buf)
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && late < maxLateDrainBytes {
			// The drain deadline passed, maybe before this goroutine got
			// to read what the pipe already held (on a busy machine it can
			// be scheduled later than the deadline): take what is there
			// now, without waiting for more.
			n, err = readAvailable(f, buf)
			late += n
		}
		if n > 0 {
			// The chunk's reference goes to the store; this reader keeps
			// its own, to read into the rest of the buffer.
			chunk := chunkData{data: buf[:n:n], buf: ob}
			ob.retain()
			used += n
			// The store and the spill writer share chunk from here on. The
			// spill writer's reference is taken first: once stored, the
			// store may let the chunk go at any time.
			chunk.buf.retain()
			start, prior := e.out.appendChunk(s, chunk)
			if start {
				sf := e.s.spills.create(e.spillName(s))
				e.spills[i] = sf
				spill = make(chan chunkData, spillQueueChunks)
				spilled.Go(func() {
					for c := range spill {
						e.s.spills.write(sf, c.data)
						c.buf.release()
					}
				})
				for _, p := range prior {
					spill <- p
				}
			}
			if spill != nil {
				spill <- chunk
			} else {
				chunk.buf.release()
			}
		}
		if err != nil {
			// A pty master reads EIO once every slave fd is closed: that
			// is its end of file. Any error ends the stream.
			return
		}
	}
}

// spillName is the name of stream s's spill file.
func (e *Exec) spillName(s runbox.Stream) string { return e.id + "." + s.String() }
