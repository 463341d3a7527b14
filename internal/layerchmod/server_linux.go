package layerchmod

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/ownthread"
	"github.com/runbox/runbox/internal/seccomp"
)

// Config says which mount's files may get the bits.
type Config struct {
	// Layer is a path on the mount whose regular files and directories
	// may be given setuid and setgid bits: "/" in a sandbox, its root
	// layer.
	Layer string
	// Apart are paths that must lie on other mounts than Layer (the
	// workspace): Start fails if one does not. Paths that do not exist
	// are skipped.
	Apart []string
	// Proc is the proc file system of the callers' pid namespace
	// ("/proc").
	Proc string
	// Logf, if not nil, is told of a failure of the server itself (not of
	// a refused call).
	Logf func(format string, args ...any)
}

// Server answers, on a thread of its own, the chmod calls a
// seccomp.Listener hands over (see the package doc).
type Server struct {
	cfg     Config
	listen  chan *seccomp.Listener
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	started *seccomp.Listener

	// Set on the server's thread before it reports ready, read there only.
	proc   int
	layer  mountID
	own    creds
	broken bool
}

// mountID is a mount's statx id, unique (STATX_MNT_ID_UNIQUE, never
// reused) where the kernel has it (6.8+).
type mountID struct {
	id     uint64
	unique bool
}

// Start starts the server's thread and waits until it is ready; Serve
// then gives it a listener. Start it before the filter is loaded: the
// thread then never carries the filter whose calls it answers.
func Start(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, listen: make(chan *seccomp.Listener, 1), quit: make(chan struct{}), done: make(chan struct{}), proc: -1}
	ready := make(chan error, 1)
	ownthread.Go(func() { s.run(ready) })
	if err := <-ready; err != nil {
		<-s.done
		return nil, err
	}
	return s, nil
}

// Serve hands l to the server, which answers its notifications from now
// on, and owns it: Close closes it.
func (s *Server) Serve(l *seccomp.Listener) {
	s.mu.Lock()
	s.started = l
	s.mu.Unlock()
	s.listen <- l
}

// Close stops the server and closes its listener (a call still waiting
// then fails with ENOSYS).
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.quit)
		s.mu.Lock()
		l := s.started
		s.mu.Unlock()
		if l != nil {
			l.Shutdown()
		}
		<-s.done
		if l != nil {
			l.Close()
		}
	})
}

// run is the server's thread (ownthread.Go: it ends with the
// goroutine, with the root and credentials it last took on), with a root
// and working directory of its own (unshare CLONE_FS) so its chroots
// concern no other thread.
func (s *Server) run(ready chan<- error) {
	defer close(s.done)
	defer func() {
		if s.proc >= 0 {
			unix.Close(s.proc)
		}
	}()
	if err := s.setup(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	var l *seccomp.Listener
	select {
	case l = <-s.listen:
	case <-s.quit:
		return
	}
	for {
		n, err := l.Receive()
		if errors.Is(err, seccomp.ErrShutdown) || errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			s.logf("layerchmod: %v", err)
			return
		}
		errno, answer := s.handle(l, n)
		if answer {
			_ = l.Respond(n.ID, errno) // fails only if the caller is gone
		}
	}
}

func (s *Server) setup() error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("layerchmod: a file-system context of its own: %w", err)
	}
	proc, err := unix.Open(s.cfg.Proc, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("layerchmod: %w", err)
	}
	s.proc = proc
	var st unix.Statfs_t
	if err := unix.Fstatfs(proc, &st); err != nil || st.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("layerchmod: %s is not a proc file system", s.cfg.Proc)
	}
	s.layer, err = pathMount(unix.AT_FDCWD, s.cfg.Layer, 0)
	if err != nil {
		return fmt.Errorf("layerchmod: the layer %s: %w", s.cfg.Layer, err)
	}
	for _, p := range s.cfg.Apart {
		m, err := pathMount(unix.AT_FDCWD, p, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("layerchmod: %s: %w", p, err)
		}
		if m == s.layer {
			return fmt.Errorf("layerchmod: %s lies on the mount of %s, whose files may get setuid bits", p, s.cfg.Layer)
		}
	}
	s.own, err = threadCreds()
	if err != nil {
		return fmt.Errorf("layerchmod: %w", err)
	}
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// pathMount returns the mount and the file type (S_IFMT bits) of path
// under dir, with statx flags (AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW).
func pathMount(dir int, path string, flags int) (mountID, error) {
	m, _, err := statMount(dir, path, flags)
	return m, err
}

func statMount(dir int, path string, flags int) (mountID, uint16, error) {
	var stx unix.Statx_t
	if err := unix.Statx(dir, path, flags|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_TYPE|unix.STATX_MNT_ID_UNIQUE, &stx); err != nil {
		return mountID{}, 0, err
	}
	switch {
	case stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
		return mountID{stx.Mnt_id, true}, stx.Mode & unix.S_IFMT, nil
	case stx.Mask&unix.STATX_MNT_ID != 0:
		return mountID{stx.Mnt_id, false}, stx.Mode & unix.S_IFMT, nil
	}
	return mountID{}, 0, errors.New("statx tells no mount id (Linux 5.8+ does)")
}

// handle answers one notification: the errno to answer with, and false
// when there is nothing to answer (the caller is gone or interrupted).
func (s *Server) handle(l *seccomp.Listener, n seccomp.Notification) (unix.Errno, bool) {
	if s.broken || n.Arch != seccomp.AuditArch {
		return unix.EPERM, true
	}
	c, errno := decode(n)
	if errno != 0 {
		return errno, true
	}
	p, errno, err := s.pin(n.PID, c)
	defer p.close()
	if !l.Valid(n.ID) {
		return 0, false // what was read may be of another thread
	}
	if err != nil {
		s.logf("layerchmod: %s by %d: %v", c.name, n.PID, err)
		return unix.EPERM, true
	}
	if errno != 0 {
		return errno, true
	}
	return s.apply(p, c), true
}

// pinned is what the server holds of a caller for one call.
type pinned struct {
	creds creds
	// root is the caller's root (-1 for fchmod, which resolves nothing);
	// start is where path resolves from: its working directory, a
	// directory descriptor, or fchmod's file; path is "" for start itself.
	root, start int
	path        string
}

func (p pinned) close() {
	for _, fd := range []int{p.root, p.start} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// pin reads and opens what the call needs of thread tid. Its results
// count only once the notification is known to be still valid.
func (s *Server) pin(tid int, c call) (pinned, unix.Errno, error) {
	p := pinned{root: -1, start: -1}
	var err error
	p.creds, err = callerCreds(s.proc, tid)
	if err != nil {
		return p, 0, err
	}
	if !c.hasPath {
		if c.fd < 0 {
			return p, unix.EBADF, nil
		}
		fdName := "fd/" + strconv.Itoa(c.fd)
		var errno unix.Errno
		p.start, errno, err = openPinned(s.proc, tid, fdName, unix.EBADF)
		if err != nil || errno != 0 {
			return p, errno, err
		}
		opath, err := isOPath(s.proc, tid, c.fd)
		if errors.Is(err, unix.ENOENT) {
			return p, unix.EBADF, nil
		}
		if err != nil {
			return p, 0, err
		}
		if opath {
			return p, unix.EBADF, nil
		}
		return p, 0, nil
	}
	path, errno, err := callerPath(s.proc, tid, c.pathAddr)
	if err != nil || errno != 0 {
		return p, errno, err
	}
	if path == "" && c.flags&unix.AT_EMPTY_PATH == 0 {
		return p, unix.ENOENT, nil
	}
	p.path = path
	p.root, errno, err = openPinned(s.proc, tid, "root", 0)
	if err != nil {
		return p, errno, err
	}
	switch {
	case len(path) > 0 && path[0] == '/':
		// The directory descriptor plays no part (as in the kernel).
	case c.fd == unix.AT_FDCWD:
		p.start, errno, err = openPinned(s.proc, tid, "cwd", 0)
	default:
		if c.fd < 0 {
			return p, unix.EBADF, nil
		}
		p.start, errno, err = openPinned(s.proc, tid, "fd/"+strconv.Itoa(c.fd), unix.EBADF)
	}
	return p, errno, err
}

// apply does the call on the server's thread, as the caller, on the
// caller's pinned objects; the errno is the answer.
func (s *Server) apply(p pinned, c call) unix.Errno {
	if p.root >= 0 {
		if err := unix.Fchdir(p.root); err != nil {
			s.logf("layerchmod: the caller's root: %v", err)
			return unix.EPERM
		}
		if err := unix.Chroot("."); err != nil {
			s.logf("layerchmod: chroot to the caller's root: %v", err)
			return unix.EPERM
		}
	}
	if err := become(p.creds, s.own); err != nil {
		s.logf("layerchmod: take on the caller's credentials: %v", err)
		s.restore()
		return unix.EPERM
	}
	defer s.restore()
	obj := p.start
	if p.path != "" {
		start := p.start
		if start < 0 {
			start = p.root // an absolute path: the kernel starts at the root
		}
		how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
		if c.flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
			how.Flags |= unix.O_NOFOLLOW
		}
		fd, err := unix.Openat2(start, p.path, &how)
		if err != nil {
			return errnoOf(err)
		}
		defer unix.Close(fd)
		obj = fd
	}
	m, typ, err := statMount(obj, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return errnoOf(err)
	}
	switch {
	case typ == unix.S_IFLNK:
		return unix.EOPNOTSUPP // the kernel's answer to chmod on a link itself
	case m != s.layer, typ != unix.S_IFREG && typ != unix.S_IFDIR:
		return unix.EPERM
	}
	return errnoOf(chmodFD(s.proc, obj, c.mode))
}

// restore gives the thread its own credentials back; if that fails, the
// server refuses every later call rather than act with credentials it
// cannot vouch for.
func (s *Server) restore() {
	if err := restore(s.own); err != nil {
		s.broken = true
		s.logf("layerchmod: the server's thread cannot take back its credentials, refusing every setuid or setgid chmod from now on: %v", err)
	}
}

// chmodFD sets the mode of the object fd (an O_PATH descriptor) holds:
// fchmodat2(AT_EMPTY_PATH) (Linux 6.6+), or else through the server's own
// /proc/thread-self/fd/N.
func chmodFD(proc, fd int, mode uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafePointer(emptyPath)), uintptr(mode), unix.AT_EMPTY_PATH, 0, 0)
	if e != unix.ENOSYS {
		if e == 0 {
			return nil
		}
		return e
	}
	return unix.Fchmodat(proc, "thread-self/fd/"+strconv.Itoa(fd), mode, 0)
}

func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EPERM
}
