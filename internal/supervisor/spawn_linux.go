package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// nonInteractiveEnv is set for every exec unless the request sets the
// variable itself, so pagers, prompts and installers never wait for a human.
var nonInteractiveEnv = map[string]string{
	"PAGER":               "cat",
	"GIT_PAGER":           "cat",
	"TERM":                "dumb",
	"GIT_TERMINAL_PROMPT": "0",
	"DEBIAN_FRONTEND":     "noninteractive",
}

// defaultPath is used when the daemon itself has no PATH (PID 1 in an image
// that sets none).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func environMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}

// execEnv is the environment an exec starts with: the session's saved
// environment, or the daemon's with the non-interactive defaults (none on a
// pty, where TERM is xterm-256color); then the request's variables; then the
// exec's markers (its id and the daemon's mark), which the request cannot
// override.
func (s *Supervisor) execEnv(spec runbox.ExecSpec, id string, sessionEnv map[string]string) map[string]string {
	env := make(map[string]string, len(s.baseEnv)+len(nonInteractiveEnv)+len(spec.Env)+1)
	if sessionEnv != nil {
		for k, v := range sessionEnv {
			env[k] = v
		}
	} else {
		for k, v := range s.baseEnv {
			env[k] = v
		}
		if spec.PTY == nil {
			for k, v := range nonInteractiveEnv {
				env[k] = v
			}
		}
	}
	if env["PATH"] == "" {
		env["PATH"] = defaultPath
	}
	if spec.PTY != nil {
		// A terminal is interactive: no TERM=dumb (from a session saved by
		// a non-pty exec, or the daemon's own environment).
		env["TERM"] = defaultPTYTerm
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	env[execMarkerVar] = id
	env[daemonMarkerVar] = s.daemonMark
	return env
}

// execEnvList is execEnv as the child gets it, with its PATH. An exec with
// no session, no variables of its own and no pty (most are) gets the
// daemon's default list, built once by New, and its markers: no map of
// the whole environment and no string per variable on each exec.
func (s *Supervisor) execEnvList(spec runbox.ExecSpec, id string, sessionEnv map[string]string) (list []string, path string) {
	if sessionEnv == nil && len(spec.Env) == 0 && spec.PTY == nil {
		list = make([]string, len(s.plainEnv), len(s.plainEnv)+2)
		copy(list, s.plainEnv)
		return append(list, execMarkerVar+"="+id, daemonMarkerVar+"="+s.daemonMark), s.plainPath
	}
	env := s.execEnv(spec, id, sessionEnv)
	list = make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return list, env["PATH"]
}

// plainEnvList returns the default environment of an exec without its
// markers, and its PATH (see execEnvList).
func (s *Supervisor) plainEnvList() ([]string, string) {
	env := s.execEnv(runbox.ExecSpec{}, "", nil)
	delete(env, execMarkerVar)
	delete(env, daemonMarkerVar)
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return list, env["PATH"]
}

// spawnFailure is the ErrSpawn that err, execve's failure on the
// program at path, is: not found (ENOENT, ENOTDIR, or a refusal of a path
// that does not exist, as Landlock's EACCES is) or not executable (EACCES,
// ENOEXEC, EISDIR, EPERM) as a shell tells them (exit 127, 126), else
// plain ErrSpawn.
func spawnFailure(path string, err error) error {
	_, serr := os.Stat(path)
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR), errors.Is(serr, fs.ErrNotExist):
		return runbox.ErrCommandNotFound
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EPERM):
		return runbox.ErrCommandNotExecutable
	}
	return runbox.ErrSpawn
}

// rootGone returns, when the sandbox's root filesystem no longer answers
// (a FUSE root whose server is gone: statfs, which always reaches the
// server, fails with ENOTCONN or ECONNABORTED), the ErrSpawn that says so
// and why (Config.RootLost); else nil.
func (s *Supervisor) rootGone() error {
	if s.cfg.RootLost == nil {
		return nil
	}
	var st unix.Statfs_t
	err := unix.Statfs("/", &st)
	if !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) {
		return nil
	}
	return fmt.Errorf("%w: %w: %s", runbox.ErrSpawn, err, s.cfg.RootLost())
}

// lookPath finds file in the directories of pathList, like a shell does.
func lookPath(file, pathList string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in PATH", file, fs.ErrNotExist)
}

// newContainment makes what will find and stop the processes of exec id:
// its own cgroup where there is one (cgroupFD is its directory, which
// clone3 enters, -1 in proc mode), and a tracker of its markers. It is made
// before the exec is published, so every reader of the exec sees it whole.
func (s *Supervisor) newContainment(id string) (cont containment, escapees *procTracker, cgroupFD int, err error) {
	if s.cgroups == nil {
		return newProcTracker(id, s.daemonMark), nil, -1, nil
	}
	c, fd, err := s.cgroups.newExec()
	if err != nil {
		return nil, nil, -1, fmt.Errorf("%w: %w", runbox.ErrSpawn, err)
	}
	// A process can leave the cgroup (root writes its pid elsewhere): the
	// stop protocol also looks for the exec's markers.
	return c, newProcTracker(id, s.daemonMark), fd, nil
}

// spawn starts e's leader: its own process group, in the cgroup cgroupFD
// when it is not -1 (entered by clone3 itself, so no child can be forked
// outside it), stdin from /dev/null unless given, stdout and stderr on
// pipes. e's containment is already made (newContainment); the caller
// releases it if spawn fails.
func (s *Supervisor) spawn(e *Exec, cgroupFD int) (err error) {
	spec := e.spec
	var sessionEnv map[string]string
	if spec.Session != "" {
		snap := s.session(spec.Session).snapshot()
		e.session = &snap
		sessionEnv = snap.env
	}
	envList, envPath := s.execEnvList(spec, e.id, sessionEnv)
	path, argv, err := s.commandLine(e, envPath)
	if err != nil {
		return err
	}
	e.dir = s.workingDir(e)

	var f spawnFiles
	defer func() { f.release(err != nil) }()
	if err := f.openStdio(s.devNull, spec); err != nil {
		return err
	}
	if e.session != nil && spec.Command != "" {
		if err := f.openStatePipe(); err != nil {
			return err
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   e.dir,
		Env:   envList,
		Files: f.files,
		Sys:   f.sysProcAttr(cgroupFD),
	}
	pid, err := s.startLeader(e, path, argv, attr)
	if err != nil {
		return err
	}
	e.markRunning(pid, f.stdinW, f.ptyMaster)
	go e.supervise(f.outR, f.errR, f.stateR)
	return nil
}

// commandLine is the program and argv of e: the shell with its command
// (after the session's prelude, in a session), or the request's argv
// with its program looked up in envPath, the exec's PATH.
func (s *Supervisor) commandLine(e *Exec, envPath string) (path string, argv []string, err error) {
	spec := e.spec
	if spec.Command == "" {
		if path, err = lookPath(spec.Argv[0], envPath); err != nil {
			if gone := s.rootGone(); gone != nil {
				return "", nil, fmt.Errorf("%s: %w", spec.Argv[0], gone)
			}
			return "", nil, fmt.Errorf("%w: %w", runbox.ErrCommandNotFound, err)
		}
		return path, spec.Argv, nil
	}
	shellName := filepath.Base(s.shell)
	command := spec.Command
	if e.session != nil {
		command = sessionPrelude(command, e.session.funcsFile, shellName == "bash")
	}
	argv = []string{shellName, "-c", command}
	if spec.Login {
		argv = []string{shellName, "-l", "-c", command}
	}
	return s.shell, argv, nil
}

// workingDir is e's working directory: the request's (relative to the
// daemon's directory), else its session's, else the daemon's.
func (s *Supervisor) workingDir(e *Exec) string {
	dir := e.spec.Cwd
	if dir == "" && e.session != nil {
		dir = e.session.cwd
	}
	if dir == "" {
		return s.cfg.Dir
	}
	if !filepath.IsAbs(dir) {
		return filepath.Join(s.cfg.Dir, dir)
	}
	return dir
}

// spawnFiles are the descriptors of a spawn: the child's (files), and
// this side's ends of its stdin, output and state pipes or terminal.
type spawnFiles struct {
	files       []uintptr  // the child's descriptors 0, 1, 2 and on
	closeAfter  []*os.File // the child's ends, closed once it has them
	childFDs    []int      // the child's plain descriptors, closed once it has them
	parentFiles []*os.File // our ends, closed only if the spawn fails

	stdinW    *os.File // our end of the child's stdin, or nil (/dev/null)
	ptyMaster *os.File // the terminal's master, on a pty
	ptySlave  *os.File
	outR      *os.File // stdout's read end (the master, on a pty)
	errR      *os.File
	stateR    *os.File // the session state's read end, or nil
}

// release closes the child's ends, and ours too if the spawn failed.
func (f *spawnFiles) release(failed bool) {
	for _, fd := range f.childFDs {
		unix.Close(fd)
	}
	if failed {
		for _, pf := range f.parentFiles {
			pf.Close()
		}
	}
	for _, cf := range f.closeAfter {
		cf.Close()
	}
}

// spawnPipe is os.Pipe with a spawn's error.
func spawnPipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: pipe: %w", runbox.ErrSpawn, err)
	}
	return r, w, nil
}

// openStdio opens the child's stdin (devNull, a pipe when the request
// writes to it, or a terminal on a pty), its stdout and stderr pipes, and
// sets the child's first three descriptors.
func (f *spawnFiles) openStdio(devNull *os.File, spec runbox.ExecSpec) error {
	stdin := devNull
	if spec.PTY != nil {
		var err error
		if f.ptyMaster, f.ptySlave, err = openPTY(*spec.PTY); err != nil {
			return fmt.Errorf("%w: pty: %w", runbox.ErrSpawn, err)
		}
		f.closeAfter = append(f.closeAfter, f.ptySlave)
		f.parentFiles = append(f.parentFiles, f.ptyMaster)
		stdin, f.stdinW = f.ptySlave, f.ptyMaster
	} else if spec.Stdin != nil || spec.StdinStream {
		r, w, err := spawnPipe()
		if err != nil {
			return err
		}
		stdin, f.stdinW = r, w
		f.closeAfter = append(f.closeAfter, r)
		f.parentFiles = append(f.parentFiles, w)
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return err
	}
	f.childFDs = append(f.childFDs, outW)
	f.parentFiles = append(f.parentFiles, outR)
	errR, errW, err := outputPipe()
	if err != nil {
		return err
	}
	f.childFDs = append(f.childFDs, errW)
	f.parentFiles = append(f.parentFiles, errR)
	f.outR, f.errR = outR, errR

	f.files = []uintptr{stdin.Fd(), uintptr(outW), uintptr(errW)}
	if f.ptySlave != nil {
		// The terminal is the child's stdin, stdout and stderr; the master
		// is read as stdout, and the stderr pipe closes with no output once
		// closeAfter drops its write end.
		outR.Close()
		f.outR = f.ptyMaster
		f.files = []uintptr{f.ptySlave.Fd(), f.ptySlave.Fd(), f.ptySlave.Fd()}
	}
	return nil
}

// openStatePipe gives the child the pipe on which a session exec's shell
// reports its state, as its descriptor stateFD.
func (f *spawnFiles) openStatePipe() error {
	r, w, err := spawnPipe()
	if err != nil {
		return err
	}
	f.stateR = r
	f.closeAfter = append(f.closeAfter, w)
	f.parentFiles = append(f.parentFiles, r)
	for len(f.files) < stateFD {
		f.files = append(f.files, ^uintptr(0)) // closed in the child
	}
	f.files = append(f.files, w.Fd())
	return nil
}

// sysProcAttr puts the child in a process group of its own (a session
// with its terminal on a pty), and in the cgroup cgroupFD unless it is -1.
func (f *spawnFiles) sysProcAttr(cgroupFD int) *syscall.SysProcAttr {
	sys := &syscall.SysProcAttr{Setpgid: true}
	if f.ptySlave != nil {
		// A new session makes the child its own process group leader too,
		// with the terminal (its fd 0) as its controlling terminal.
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if cgroupFD >= 0 {
		sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
	}
	return sys
}

// startLeader forks and execs e's leader and registers it for the reaper,
// stopped at once if the sandbox was paused meanwhile; it returns its pid,
// or the spawn error a shell would report.
func (s *Supervisor) startLeader(e *Exec, path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	e.mu.Lock()
	e.started = time.Now()
	e.activeStart = s.pause.now()
	e.mu.Unlock()
	if s.cfg.OOMKills != nil {
		e.oomKillsAtStart, _ = s.cfg.OOMKills()
	}
	s.spawnMu.RLock()
	pid, err := s.forkExec(path, argv, attr)
	if err == nil {
		s.leadersMu.Lock()
		s.leaders[pid] = e
		s.leadersMu.Unlock()
		if paused, _ := s.pause.state(); paused && s.cgroups == nil {
			// Pause froze the sandbox while this exec was being spawned
			// (it waits for spawnMu): the new process is stopped too. (In
			// a cgroup, clone3 put it in the exec's frozen cgroup.)
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
	}
	s.spawnMu.RUnlock()
	if err != nil {
		dir := attr.Dir
		if gone := s.rootGone(); gone != nil {
			return 0, fmt.Errorf("%s: %w", path, gone)
		}
		if errors.Is(err, syscall.ENOENT) && dir != "" {
			if _, serr := os.Stat(dir); serr != nil {
				return 0, fmt.Errorf("%w: working directory %s: %w", runbox.ErrSpawn, dir, serr)
			}
		}
		return 0, fmt.Errorf("%w: %s: %w", spawnFailure(path, err), path, err)
	}
	return pid, nil
}

// markRunning records the leader's pid and moves e to running (or
// stopping, if a stop came first), then hands it its stdin (stdinW, and
// the terminal's master on a pty) and starts feeding the request's.
func (e *Exec) markRunning(pid int, stdinW, ptyMaster *os.File) {
	e.cont.leaderStarted(pid)
	e.mu.Lock()
	e.pid = pid
	if e.state == runbox.ExecStarting {
		e.state = runbox.ExecRunning
		if e.reason != stopNone {
			e.state = runbox.ExecStopping
		}
	}
	e.mu.Unlock()
	if stdinW != nil {
		e.stdinMu.Lock()
		e.stdin, e.pty = stdinW, ptyMaster
		e.stdinMu.Unlock()
		if data, stream := e.spec.Stdin, e.spec.StdinStream; data != nil {
			e.stdinFeed.Go(func() { e.feedStdin(data, !stream) })
		}
	}
}

// feedStdin writes the request's stdin bytes, then closes stdin unless it
// stays open as a stream.
func (e *Exec) feedStdin(data []byte, closeAfter bool) {
	e.stdinMu.Lock()
	f := e.stdin
	e.stdinMu.Unlock()
	if f == nil {
		return
	}
	_, _ = f.Write(data) // an EPIPE means the command did not want it all
	if closeAfter {
		_ = e.CloseStdin()
	}
}

// outputPipe makes the pipe of one output stream: its read end for runboxd,
// non-blocking and in the poller, and its write end for the child as a
// plain descriptor (as an *os.File it would be put in the poller, made
// blocking again by Fd, and taken out of the poller at Close: six system
// calls per pipe on the path of every exec, for nothing).
//
// The pipe is asked to hold outputPipeBytes, so a command writing fast
// fills larger reads and wakes runboxd less often. That is best effort:
// past the user's pipe quota (fs.pipe-user-pages-soft) the kernel refuses,
// and the pipe keeps its default 64 KiB.
func outputPipe() (r *os.File, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, fmt.Errorf("%w: pipe: %w", runbox.ErrSpawn, err)
	}
	_, _ = unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, outputPipeBytes)
	// O_NONBLOCK is the only status flag a pipe's read end has.
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, fmt.Errorf("%w: pipe: %w", runbox.ErrSpawn, err)
	}
	// A non-blocking descriptor becomes a pollable file: reads park the
	// goroutine, and read deadlines (the drain) work.
	return os.NewFile(uintptr(p[0]), "|0"), p[1], nil
}
