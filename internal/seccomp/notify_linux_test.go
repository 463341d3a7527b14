package seccomp

import (
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/runbox/runbox/internal/ownthread"
	"golang.org/x/sys/unix"
)

// TestLayerPrivilegeRulesNotify: under LayerPrivilegeRules, a chmod-family
// call with a setuid or setgid bit waits for the listener and returns what
// it answers (ENOTSUP for fchmodat, success for fchmod: neither is what
// the kernel would have said), and the file's mode is untouched (the call
// never ran in the kernel); the same call without the bits runs without
// the listener; creating calls with the bits are still refused with
// EPERM; once the filtered thread is gone, Receive returns io.EOF.
func TestLayerPrivilegeRulesNotify(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	fd, err := unix.Open(f, unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	results := map[string]error{}
	loaded := make(chan *Listener, 1)
	failed := make(chan error, 1)
	done := make(chan struct{})
	// A thread of its own, which ends with it: the listener then hears
	// that its filter's last user is gone.
	ownthread.Go(func() {
		defer close(done)
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			failed <- err
			return
		}
		l, err := LoadLayerPrivilegeFilter()
		if err != nil {
			failed <- err
			return
		}
		loaded <- l
		results["fchmodat(0700)"] = unix.Fchmodat(unix.AT_FDCWD, f, 0o700, 0)
		fd, err := unix.Open(filepath.Join(dir, "g"), unix.O_CREAT|unix.O_WRONLY, 0o4755)
		if err == nil {
			unix.Close(fd)
		}
		results["openat(O_CREAT, 04755)"] = err
		results["mkdirat(02755)"] = unix.Mkdir(filepath.Join(dir, "d"), 0o2755)
		results["fchmodat(04755)"] = unix.Fchmodat(unix.AT_FDCWD, f, 0o4755, 0)
		if fd, err = unix.Open(f, unix.O_RDONLY, 0); err == nil {
			results["fchmod(02755)"] = unix.Fchmod(fd, 0o2755)
			unix.Close(fd)
		}
	})
	var l *Listener
	select {
	case l = <-loaded:
	case err := <-failed:
		t.Fatalf("load filter: %v", err)
	}
	defer l.Close()
	for _, want := range []struct {
		nr     int
		mode   uint64
		answer unix.Errno
	}{{unix.SYS_FCHMODAT, 0o4755, unix.ENOTSUP}, {unix.SYS_FCHMOD, 0o2755, 0}} {
		n, err := l.Receive()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		mode := n.Args[2]
		if n.Nr == unix.SYS_FCHMOD {
			mode = n.Args[1]
		}
		if n.Nr != want.nr || mode != want.mode || n.Arch != AuditArch {
			t.Errorf("notified call %d mode %o arch %x, want %d mode %o", n.Nr, mode, n.Arch, want.nr, want.mode)
		}
		if !l.Valid(n.ID) {
			t.Errorf("notification %d of a waiting call is not valid", n.ID)
		}
		if err := l.Respond(n.ID, want.answer); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if _, err := l.Receive(); !errors.Is(err, io.EOF) {
		t.Errorf("receive once the filtered thread is gone: %v, want io.EOF", err)
	}
	for name, want := range map[string]error{
		"fchmodat(0700)": nil, "openat(O_CREAT, 04755)": unix.EPERM, "mkdirat(02755)": unix.EPERM,
		"fchmodat(04755)": unix.ENOTSUP, "fchmod(02755)": nil,
	} {
		if err := results[name]; !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(f, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o700 {
		t.Errorf("mode after the notified calls: %o, want 700 (the listener answered, the kernel did nothing)", st.Mode&0o7777)
	}
}

// TestListenerShutdown: Shutdown ends a Receive under way.
func TestListenerShutdown(t *testing.T) {
	loaded := make(chan *Listener, 1)
	failed := make(chan error, 1)
	hold := make(chan struct{})
	ownthread.Go(func() { // a thread of its own, which ends with it
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			failed <- err
			return
		}
		l, err := LoadLayerPrivilegeFilter()
		if err != nil {
			failed <- err
			return
		}
		loaded <- l
		<-hold // keep the filter in use
	})
	defer close(hold)
	var l *Listener
	select {
	case l = <-loaded:
	case err := <-failed:
		t.Fatalf("load filter: %v", err)
	}
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		_, err := l.Receive()
		got <- err
	}()
	l.Shutdown()
	if err := <-got; !errors.Is(err, ErrShutdown) {
		t.Errorf("receive after Shutdown: %v, want ErrShutdown", err)
	}
}
