package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// Cgroup modes as Info reports them.
const (
	ModeCgroup2 = "cgroup2"
	ModeProc    = "proc"
)

// Supervisor owns every exec of one sandbox.
type Supervisor struct {
	cfg       Config
	mode      string
	cgroups   *cgroupParent // nil in proc mode
	spawner   *spawnThread  // nil unless ExecCgroupsV1 or SpawnSetup are given
	shell     string        // bash, or sh where bash is absent
	baseEnv   map[string]string
	plainEnv  []string // an exec's default environment, markers aside (execEnvList)
	plainPath string   // its PATH
	devNull   *os.File
	startedAt time.Time
	stateDir  string
	spills    *spillDir
	ownsState bool // stateDir was created by New and is removed at Shutdown

	// daemonMark is set in every exec's environment (daemonMarkerVar), so
	// the daemon finds its commands' processes among a shared /proc's.
	daemonMark string

	// spawnMu is the barrier between spawning and reaping: spawns hold it
	// shared from fork until the leader is registered; the reaper takes it
	// exclusively before looking a reaped pid up, so it never misses one.
	spawnMu   sync.RWMutex
	leadersMu sync.Mutex
	leaders   map[int]*Exec

	mu         sync.Mutex
	execs      map[string]*Exec
	rings      retainedQueue // exited execs holding replay rings (RetainedOutputBytes)
	results    retainedQueue // exited execs counted against RetainedResultBytes
	tombstones map[string]time.Time
	sessions   map[string]*session
	total      uint64
	closed     bool

	// pause is the clock of deadlines and idle timeouts, stopped while
	// the sandbox is frozen (pause_linux.go): while the user's pause
	// stands or a hold does.
	pause *pauseClock
	// freezeMu serialises the changes of userPaused and holds and the
	// freezes and thaws they make, so the frozen state always follows
	// the last change. userPaused and holds are written with freezeMu and
	// mu held, and read with either.
	freezeMu   sync.Mutex
	userPaused bool // the user's Pause stands (until Resume)
	holds      int  // open holds (Hold), each until its release
	thawedDown bool // Shutdown thawed the sandbox for good

	quit     chan struct{}
	loopDone sync.WaitGroup
	shutdown sync.Once
}

// New starts a Supervisor: it makes the process a child subreaper, picks the
// containment mode, and starts the reaper.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Supervisor{
		cfg:        cfg,
		baseEnv:    environMap(os.Environ()),
		leaders:    make(map[int]*Exec),
		execs:      make(map[string]*Exec),
		tombstones: make(map[string]time.Time),
		sessions:   make(map[string]*session),
		quit:       make(chan struct{}),
		startedAt:  time.Now(),
		daemonMark: newDaemonMark(),
		pause:      newPauseClock(),
	}
	s.plainEnv, s.plainPath = s.plainEnvList()
	s.shell = "/bin/sh"
	if p, err := lookPath("bash", s.baseEnv["PATH"]); err == nil {
		s.shell = p
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("supervisor: become child subreaper: %w", err)
	}
	if err := s.chooseMode(); err != nil {
		return nil, err
	}
	if err := s.makeStateDir(); err != nil {
		return nil, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if len(cfg.ExecCgroupsV1) > 0 || cfg.SpawnSetup != nil {
		var setup func() error
		if cfg.SpawnSetup != nil {
			setup = func() error { return cfg.SpawnSetup(s.mode) }
		}
		if s.spawner, err = startSpawnThread(cfg.ExecCgroupsV1, setup); err != nil {
			devNull.Close()
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	s.devNull = devNull
	s.loopDone.Add(2)
	go s.reapLoop()
	go s.sweepLoop()
	return s, nil
}

// chooseMode picks the containment mode cfg.CgroupMode asks for: a cgroup
// per exec when it can (auto) or must (cgroup2), else the /proc scan.
func (s *Supervisor) chooseMode() error {
	switch s.cfg.CgroupMode {
	case "", "auto":
		if p, err := newCgroupParent(s.cfg.CgroupDir); err == nil {
			s.mode, s.cgroups = ModeCgroup2, p
		} else {
			s.mode = ModeProc
		}
	case ModeCgroup2:
		p, err := newCgroupParent(s.cfg.CgroupDir)
		if err != nil {
			return fmt.Errorf("supervisor: cgroup2 mode: %w", err)
		}
		s.mode, s.cgroups = ModeCgroup2, p
	case "off", ModeProc:
		s.mode = ModeProc
	default:
		return fmt.Errorf("supervisor: unknown cgroup mode %q (want auto, cgroup2 or off)", s.cfg.CgroupMode)
	}
	return nil
}

// makeStateDir makes the state directory (a temporary one of its own when
// cfg names none) and sets up the spill directory, in it unless cfg names
// another.
func (s *Supervisor) makeStateDir() error {
	s.stateDir = s.cfg.StateDir
	if s.stateDir == "" {
		dir, err := os.MkdirTemp("", "runboxd-state-")
		if err != nil {
			return fmt.Errorf("supervisor: state directory: %w", err)
		}
		s.stateDir, s.ownsState = dir, true
	} else if err := os.MkdirAll(s.stateDir, 0o700); err != nil {
		return fmt.Errorf("supervisor: state directory: %w", err)
	}
	spillDir := s.cfg.SpillDir
	if spillDir == "" {
		spillDir = filepath.Join(s.stateDir, "spill")
	}
	s.spills = newSpillDir(spillDir, s.cfg.SpillBytes)
	return nil
}

// forkExec forks and executes path, on the spawn thread when there is one,
// and gives the new process the commands' oom_score_adj.
func (s *Supervisor) forkExec(path string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	if s.spawner != nil {
		pid, err = s.spawner.forkExec(path, argv, attr)
	} else {
		pid, err = syscall.ForkExec(path, argv, attr)
	}
	if err == nil && s.cfg.CommandOOMScoreAdj >= 0 {
		setOOMScoreAdj(pid, s.cfg.CommandOOMScoreAdj)
	}
	return pid, err
}

// Mode reports the containment mode: ModeCgroup2 or ModeProc.
func (s *Supervisor) Mode() string { return s.mode }

// DaemonMark is the value of RUNBOX_DAEMON in every exec's environment:
// what finds this daemon's processes in /proc, even after it is gone.
func (s *Supervisor) DaemonMark() string { return s.daemonMark }

// CgroupDir is the cgroup v2 directory holding every exec's cgroup, ""
// in proc mode: what finds this daemon's processes after it is gone.
func (s *Supervisor) CgroupDir() string {
	if s.cgroups == nil {
		return ""
	}
	return s.cgroups.dir
}

// newDaemonMark returns a random value for daemonMarkerVar.
func newDaemonMark() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newExecID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > maxIDLength {
		return false
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':'
		if !ok {
			return false
		}
	}
	return true
}

func validate(spec runbox.ExecSpec) error {
	switch {
	case spec.ID != "" && !validID(spec.ID):
		return fmt.Errorf("%w: id %q: use 1-%d characters of A-Z a-z 0-9 - _ . :", runbox.ErrInvalidSpec, spec.ID, maxIDLength)
	case spec.Command == "" && len(spec.Argv) == 0:
		return fmt.Errorf("%w: no command or argv", runbox.ErrInvalidSpec)
	case spec.Command != "" && len(spec.Argv) > 0:
		return fmt.Errorf("%w: both command and argv given", runbox.ErrInvalidSpec)
	case len(spec.Argv) > 0 && spec.Argv[0] == "":
		return fmt.Errorf("%w: empty program name", runbox.ErrInvalidSpec)
	case spec.Timeout < 0 || spec.IdleTimeout < 0: // a negative Grace is runbox.NoGrace
		return fmt.Errorf("%w: negative duration", runbox.ErrInvalidSpec)
	case spec.HeadBytes < 0 || spec.TailBytes < 0:
		return fmt.Errorf("%w: negative output limit", runbox.ErrInvalidSpec)
	case spec.Session != "" && !validID(spec.Session):
		return fmt.Errorf("%w: session %q: use 1-%d characters of A-Z a-z 0-9 - _ . :", runbox.ErrInvalidSpec, spec.Session, maxIDLength)
	}
	// Sizes and NUL bytes: the same check the client makes before sending.
	return spec.CheckInput()
}

// Start runs spec, or attaches to the exec with spec.ID if it exists.
func (s *Supervisor) Start(spec runbox.ExecSpec) (*Exec, bool, error) {
	e, _, attached, err := s.start(spec, false)
	return e, attached, err
}

// StartFollowing is Start for a caller that will consume the exec's output
// live: it also returns an [OutputReader] from the first chunk, registered
// before the command runs, so flow control holds the command's output for
// it from the first byte (a reader opened after Start may find the start
// already evicted from the ring). When the id names an existing exec, the
// reader starts at sequence 1 of that exec. Close the reader when done.
func (s *Supervisor) StartFollowing(spec runbox.ExecSpec) (*Exec, *OutputReader, bool, error) {
	return s.start(spec, true)
}

func (s *Supervisor) start(spec runbox.ExecSpec, follow bool) (*Exec, *OutputReader, bool, error) {
	if err := validate(spec); err != nil {
		return nil, nil, false, err
	}
	digest := digestSpec(spec) // before the lock: it reads all of stdin
	if spec.ID == "" {
		spec.ID = newExecID()
	}
	attach := func(e *Exec) (*Exec, *OutputReader, bool, error) {
		var r *OutputReader
		if follow {
			r = e.Output(1)
		}
		return e, r, true, nil
	}
	s.mu.Lock()
	e, err := s.existingLocked(spec.ID, digest)
	s.mu.Unlock()
	if err != nil || e != nil {
		if err != nil {
			return nil, nil, false, err
		}
		return attach(e)
	}
	// The containment is made before the exec is published: List, Signal
	// and Shutdown read it without waiting for the spawn.
	cont, escapees, cgroupFD, err := s.newContainment(spec.ID)
	if err != nil {
		return nil, nil, false, fmt.Errorf("start exec %s: %w", spec.ID, err)
	}
	s.mu.Lock()
	if e, err := s.existingLocked(spec.ID, digest); err != nil || e != nil {
		// Started (or cancelled) by another call meanwhile.
		s.mu.Unlock()
		cont.release()
		if err != nil {
			return nil, nil, false, err
		}
		return attach(e)
	}
	if paused, _ := s.pause.state(); paused {
		user, holds := s.userPaused, s.holds
		s.mu.Unlock()
		cont.release()
		return nil, nil, false, pausedError(spec.ID, user, holds)
	}
	s.total++
	e = newExec(s, spec, s.total, cont, escapees)
	e.digest = digest
	var r *OutputReader
	if follow {
		r = e.out.flowReader()
		e.out.setLive(r) // a SpillUnsent exec spills what r misses
	}
	s.execs[spec.ID] = e
	s.mu.Unlock()

	if err := s.spawn(e, cgroupFD); err != nil {
		if r != nil {
			r.Close()
		}
		s.mu.Lock()
		delete(s.execs, spec.ID)
		s.mu.Unlock()
		e.spawnFailed(err)
		return nil, nil, false, fmt.Errorf("start exec %s: %w", spec.ID, err)
	}
	return e, r, false, nil
}

// existingLocked returns the exec with id if there is one (nil if not),
// or why a Start with id and the spec of digest is refused. s.mu is held.
func (s *Supervisor) existingLocked(id string, digest specDigest) (*Exec, error) {
	if s.closed {
		return nil, fmt.Errorf("start exec: %w: daemon is shutting down", runbox.ErrSandboxLost)
	}
	if e, ok := s.execs[id]; ok {
		if err := e.digest.conflict(id, digest); err != nil {
			return nil, fmt.Errorf("start exec %s: %w", id, err)
		}
		return e, nil
	}
	if _, ok := s.tombstones[id]; ok {
		return nil, fmt.Errorf("start exec %s: %w", id, runbox.ErrCancelled)
	}
	return nil, nil
}

// Get returns the exec with id.
func (s *Supervisor) Get(id string) (*Exec, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.execs[id]
	if !ok {
		return nil, fmt.Errorf("exec %s: %w", id, runbox.ErrExecNotFound)
	}
	return e, nil
}

// Cancel stops the exec with id through the stop protocol (grace zero means
// the exec's own); for an exec that has ended, it stops what the exec left
// running. For an unknown id it leaves a tombstone, so a later Start with
// that id is refused. It returns at once, the stop running on its own:
// wait with e.WaitStopped.
func (s *Supervisor) Cancel(id string, grace time.Duration) (e *Exec, known bool) {
	s.mu.Lock()
	e, ok := s.execs[id]
	if !ok {
		if validID(id) {
			s.tombstones[id] = time.Now()
		}
		s.mu.Unlock()
		return nil, false
	}
	s.mu.Unlock()
	e.cancel(grace)
	return e, true
}

// Signal sends sig to every live process of the exec with id.
func (s *Supervisor) Signal(id string, sig syscall.Signal) (int, error) {
	e, err := s.Get(id)
	if err != nil {
		return 0, err
	}
	return e.signal(sig)
}

// List describes every exec the supervisor keeps, oldest first.
func (s *Supervisor) List() []runbox.ExecInfo {
	s.mu.Lock()
	execs := make([]*Exec, 0, len(s.execs))
	for _, e := range s.execs {
		execs = append(execs, e)
	}
	s.mu.Unlock()
	sort.Slice(execs, func(i, j int) bool { return execs[i].n < execs[j].n })
	infos := make([]runbox.ExecInfo, len(execs))
	for i, e := range execs {
		infos[i] = e.Info()
	}
	return infos
}

// Shutdown stops every exec with the stop protocol (grace zero means each
// exec's own), waits for them, releases cgroups and stops the reaper. Start
// is refused from the moment it is called. It is idempotent.
func (s *Supervisor) Shutdown(ctx context.Context, grace time.Duration) error {
	// A frozen sandbox (paused or held) is thawed first, for good, so its
	// commands can take the SIGTERM of the stop protocol.
	s.thawForShutdown()
	s.mu.Lock()
	s.closed = true
	execs := make([]*Exec, 0, len(s.execs))
	for _, e := range s.execs {
		execs = append(execs, e)
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, e := range execs {
		wg.Go(func() { e.cancel(grace) })
	}
	all := make(chan struct{})
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		wg.Wait()
		for _, e := range execs {
			if e.WaitStopped(waitCtx) != nil {
				return
			}
		}
		close(all)
	}()
	var err error
	select {
	case <-all:
	case <-ctx.Done():
		err = fmt.Errorf("shutdown: %w", ctx.Err())
	}
	s.shutdown.Do(func() {
		// What is left of execs that ended by themselves and were let go
		// (a process that moved out of its exec's cgroup) still carries
		// the daemon's mark.
		newProcTracker("", s.daemonMark).killAll()
		close(s.quit)
		s.loopDone.Wait()
		if s.spawner != nil {
			s.spawner.stop()
		}
		if err == nil {
			s.mu.Lock()
			for _, e := range s.execs {
				e.releaseContainment()
			}
			s.mu.Unlock()
			if s.cgroups != nil {
				if rerr := s.cgroups.remove(); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
					err = fmt.Errorf("shutdown: remove cgroup: %w", rerr)
				}
			}
		}
		s.devNull.Close()
		if s.ownsState {
			os.RemoveAll(s.stateDir)
		}
	})
	return err
}

// sweepLoop forgets exited execs (and tombstones) past the retention window
// and frees the containment of execs whose background processes are gone.
func (s *Supervisor) sweepLoop() {
	defer s.loopDone.Done()
	interval := min(max(s.cfg.Retention/4, 50*time.Millisecond), 5*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.sweep(time.Now())
		}
	}
}

func (s *Supervisor) sweep(now time.Time) {
	s.mu.Lock()
	var candidates []*Exec
	for _, e := range s.execs {
		if e.finished() {
			candidates = append(candidates, e)
		}
	}
	for id, at := range s.tombstones {
		if now.Sub(at) > max(s.cfg.Retention, tombstoneRetention) {
			delete(s.tombstones, id)
		}
	}
	s.mu.Unlock()
	for _, e := range candidates {
		if !e.releaseIfEmpty() {
			continue // background processes still run: keep the exec so Cancel can reach them
		}
		if now.Sub(e.finishedAt()) > s.cfg.Retention {
			s.mu.Lock()
			if s.execs[e.id] == e {
				delete(s.execs, e.id)
			}
			s.mu.Unlock()
		}
	}
}
