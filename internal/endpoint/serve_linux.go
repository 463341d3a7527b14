package endpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/runbox/runbox/internal/daemonauth"

	"github.com/runbox/runbox/internal/recordfile"
)

// Server is an endpoint being served: one sandbox's socket and how to
// reach its runboxd.
type Server struct {
	// Socket is the path to listen on (Socket's answer).
	Socket string
	// Idle is how long to live without a connection (> 0).
	Idle time.Duration
	// Dial opens a fresh byte stream to the sandbox's runboxd (an SSH
	// channel on the endpoint's one connection), unauthenticated: the
	// caller on the socket presents the secret.
	Dial func(ctx context.Context) (net.Conn, error)
	// Gone reports whether the sandbox is gone from this machine (its
	// record removed): the endpoint then exits.
	Gone func() bool
	// Ready, when not nil, is told readyWord once the socket listens, and
	// closed (the starting CLI waits on it).
	Ready io.WriteCloser

	mu     sync.Mutex
	active map[net.Conn]struct{}
	last   time.Time // when the last connection ended
	ln     *net.UnixListener
	why    string // why the endpoint stops
}

// dialTimeout bounds one upstream dial (the ssh provider's own patience
// with an unreachable host is shorter).
const dialTimeout = time.Minute

// Serve listens on the socket and carries connections until the endpoint
// has been idle for s.Idle or its sandbox is gone, then removes the socket.
// When another endpoint already serves the socket, it says ready and
// returns nil.
func (s *Server) Serve() error {
	err := s.serve()
	if s.Ready != nil {
		if err != nil {
			fmt.Fprintln(s.Ready, err)
		}
		s.Ready.Close()
	}
	return err
}

func (s *Server) serve() error {
	if s.Idle <= 0 {
		return errors.New("endpoint: no idle time")
	}
	dir := filepath.Dir(s.Socket)
	if err := privateDir(dir); err != nil {
		return err
	}
	release, held, err := recordfile.TryLock(s.Socket + ".lock")
	if err != nil {
		return fmt.Errorf("endpoint: %w", err)
	}
	if held {
		return s.ready() // another endpoint serves this sandbox
	}
	defer release()
	// The lock is ours: a socket file left there is stale.
	if err := os.Remove(s.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale endpoint socket: %w", err)
	}
	old := syscall.Umask(0o177) // the socket is born 0600
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.Socket, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("endpoint listen: %w", err)
	}
	ln.SetUnlinkOnClose(false) // removed below, while the lock is held
	defer os.Remove(s.Socket)
	s.ln, s.last, s.active = ln, time.Now(), map[net.Conn]struct{}{}
	if err := s.ready(); err != nil {
		ln.Close()
		return err
	}
	go s.watch()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			why := s.why
			for c := range s.active {
				c.Close()
			}
			s.mu.Unlock()
			if why == "" {
				return fmt.Errorf("endpoint accept: %w", err)
			}
			log.Printf("endpoint %s: exits: %s", s.Socket, why)
			return nil
		}
		if err := samePeer(c); err != nil {
			log.Printf("endpoint %s: refused a connection: %v", s.Socket, err)
			c.Close()
			continue
		}
		if !s.track(c) {
			c.Close()
			continue
		}
		go s.carry(c)
	}
}

// ready tells the starting CLI the socket listens.
func (s *Server) ready() error {
	if s.Ready == nil {
		return nil
	}
	_, err := io.WriteString(s.Ready, readyWord+"\n")
	s.Ready.Close()
	s.Ready = nil
	return err
}

// track counts c as active, unless the endpoint is stopping.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.why != "" {
		return false
	}
	s.active[c] = struct{}{}
	return true
}

// carry joins c to a fresh stream to runboxd, both ways; when either side
// ends, both close. A stream that cannot be opened closes c: the caller's
// handshake fails, and runbox-full says what became of the sandbox.
func (s *Server) carry(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.active, c)
		s.last = time.Now()
		s.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	up, err := s.Dial(ctx)
	cancel()
	if err != nil {
		log.Printf("endpoint %s: reach runboxd: %v", s.Socket, err)
		if s.Gone() {
			s.stop("the sandbox is gone")
		}
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// watch stops the endpoint when it has been idle for s.Idle, or when the
// sandbox is gone.
func (s *Server) watch() {
	every := max(min(s.Idle/4, goneCheckEvery), 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if s.Gone() {
			s.stop("the sandbox is gone")
			return
		}
		s.mu.Lock()
		idle := len(s.active) == 0 && time.Since(s.last) >= s.Idle
		s.mu.Unlock()
		if idle {
			s.stop(fmt.Sprintf("idle for %v", s.Idle))
			return
		}
	}
}

// stop closes the listener: Serve returns, closing what it carries.
func (s *Server) stop(why string) {
	s.mu.Lock()
	if s.why == "" {
		s.why = why
		s.ln.Close()
	}
	s.mu.Unlock()
}

// samePeer refuses a peer whose uid is not this process's: the socket's
// permissions say the same, this holds even if they are loosened.
func samePeer(c *net.UnixConn) error {
	uid, pid, err := daemonauth.PeerCred(c)
	if err != nil {
		return err
	}
	if uid != os.Getuid() {
		return fmt.Errorf("peer pid %d is uid %d, not %d", pid, uid, os.Getuid())
	}
	return nil
}

// privateDir makes dir (0700) or checks that it is this user's and 0700,
// correcting its mode when it is ours.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("endpoint directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("endpoint directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("endpoint directory %s: not a directory of uid %d", dir, os.Getuid())
	}
	if fi.Mode().Perm() != 0o700 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}
