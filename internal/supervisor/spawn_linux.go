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
	var path string
	var argv []string
	if spec.Command != "" {
		path = s.shell
		shellName := filepath.Base(s.shell)
		command := spec.Command
		if e.session != nil {
			command = sessionPrelude(command, e.session.funcsFile, shellName == "bash")
		}
		argv = []string{shellName, "-c", command}
		if spec.Login {
			argv = []string{shellName, "-l", "-c", command}
		}
	} else {
		if path, err = lookPath(spec.Argv[0], envPath); err != nil {
			return fmt.Errorf("%w: %w", runbox.ErrCommandNotFound, err)
		}
		argv = spec.Argv
	}
	dir := spec.Cwd
	if dir == "" && e.session != nil {
		dir = e.session.cwd
	}
	if dir == "" {
		dir = s.cfg.Dir
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.cfg.Dir, dir)
	}
	e.dir = dir

	var closeAfter []*os.File // the child's ends, closed once it has them
	defer func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}()
	var parentFiles []*os.File // our ends, closed only if the spawn fails
	defer func() {
		if err != nil {
			for _, f := range parentFiles {
				f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: pipe: %w", runbox.ErrSpawn, err)
		}
		return r, w, nil
	}

	stdin := s.devNull
	var stdinW *os.File
	var ptyMaster, ptySlave *os.File
	if spec.PTY != nil {
		if ptyMaster, ptySlave, err = openPTY(*spec.PTY); err != nil {
			return fmt.Errorf("%w: pty: %w", runbox.ErrSpawn, err)
		}
		closeAfter = append(closeAfter, ptySlave)
		parentFiles = append(parentFiles, ptyMaster)
		stdin, stdinW = ptySlave, ptyMaster
	} else if spec.Stdin != nil || spec.StdinStream {
		r, w, err := pipe()
		if err != nil {
			return err
		}
		stdin, stdinW = r, w
		closeAfter = append(closeAfter, r)
		parentFiles = append(parentFiles, w)
	}
	var childFDs []int // the child's plain descriptors, closed once it has them
	defer func() {
		for _, fd := range childFDs {
			unix.Close(fd)
		}
	}()
	outR, outW, err := outputPipe()
	if err != nil {
		return err
	}
	childFDs = append(childFDs, outW)
	parentFiles = append(parentFiles, outR)
	errR, errW, err := outputPipe()
	if err != nil {
		return err
	}
	childFDs = append(childFDs, errW)
	parentFiles = append(parentFiles, errR)

	files := []uintptr{stdin.Fd(), uintptr(outW), uintptr(errW)}
	if ptySlave != nil {
		// The terminal is the child's stdin, stdout and stderr; the master
		// is read as stdout, and the stderr pipe closes with no output once
		// closeAfter drops its write end.
		outR.Close()
		outR = ptyMaster
		files = []uintptr{ptySlave.Fd(), ptySlave.Fd(), ptySlave.Fd()}
	}
	var stateR *os.File
	if e.session != nil && spec.Command != "" {
		r, w, err := pipe()
		if err != nil {
			return err
		}
		stateR = r
		closeAfter = append(closeAfter, w)
		parentFiles = append(parentFiles, r)
		for len(files) < stateFD {
			files = append(files, ^uintptr(0)) // closed in the child
		}
		files = append(files, w.Fd())
	}

	sys := &syscall.SysProcAttr{Setpgid: true}
	if ptySlave != nil {
		// A new session makes the child its own process group leader too,
		// with the terminal (its fd 0) as its controlling terminal.
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if cgroupFD >= 0 {
		sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
	}
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   envList,
		Files: files,
		Sys:   sys,
	}

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
		if errors.Is(err, syscall.ENOENT) && dir != "" {
			if _, serr := os.Stat(dir); serr != nil {
				return fmt.Errorf("%w: working directory %s: %w", runbox.ErrSpawn, dir, serr)
			}
		}
		return fmt.Errorf("%w: %s: %w", spawnFailure(path, err), path, err)
	}

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
		if spec.Stdin != nil {
			e.stdinFeed.Go(func() { e.feedStdin(spec.Stdin, !spec.StdinStream) })
		}
	}
	go e.supervise(outR, errR, stateR)
	return nil
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
