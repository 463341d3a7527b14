package layerchmod

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/ownthread"
	"github.com/runbox/runbox/internal/seccomp"
)

// serve starts a Server whose layer is layer's mount and a thread under
// the filter whose listener it serves, and returns a function that runs
// probe on that thread.
func serve(t *testing.T, layer string) func(probe func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server chroots and takes on the caller's credentials; run the tests as root (CI does)")
	}
	srv, err := Start(Config{Layer: layer, Proc: "/proc", Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	probes := make(chan func())
	loaded := make(chan error, 1)
	ownthread.Go(func() { // a thread of its own, which ends with it
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			loaded <- err
			return
		}
		l, err := seccomp.LoadLayerPrivilegeFilter()
		if err != nil {
			loaded <- err
			return
		}
		srv.Serve(l)
		loaded <- nil
		for p := range probes {
			p()
		}
	})
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(probes)
		srv.Close()
	})
	return func(probe func()) {
		done := make(chan struct{})
		probes <- func() { probe(); close(done) }
		<-done
	}
}

// TestServer: a setuid chmod of a file on the layer's mount is applied
// (chmod, fchmodat2 with AT_EMPTY_PATH, fchmod); on another mount (a
// tmpfs of the test's own) it is refused and the file keeps its mode; a link on
// the layer to the other mount is followed, and refused, or under
// AT_SYMLINK_NOFOLLOW gets EOPNOTSUPP; a missing path gets ENOENT, a bad
// descriptor EBADF, an O_PATH one EBADF; a thread with fsuid 1000 and no
// capabilities cannot chmod root's file (EPERM, from the kernel) nor
// reach one in a 0700 directory of root's (EACCES: the path is resolved
// with the caller's credentials).
func TestServer(t *testing.T) {
	layer := t.TempDir()
	on := serve(t, layer)
	// Another mount, made here (the test runs as root): a tmpfs of its own.
	other := t.TempDir()
	if err := unix.Mount("tmpfs", other, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=755"); err != nil {
		t.Fatalf("mount a tmpfs for a second mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(other, unix.MNT_DETACH) })
	mk := func(dir, name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Searchable by anyone but a 0700 directory of root's.
	for _, d := range []string{filepath.Dir(layer), layer} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	closed := filepath.Join(layer, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	inLayer, inLayer2, inLayer3, inClosed, elsewhere := mk(layer, "f"), mk(layer, "g"), mk(layer, "h"), mk(closed, "f"), mk(other, "f")
	link := filepath.Join(layer, "link")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	fchmodat2 := func(dir int, path string, mode uint32, flags int) error {
		_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(dir), uintptr(unsafePointer(append([]byte(path), 0))), uintptr(mode), uintptr(flags), 0, 0)
		if e != 0 {
			return e
		}
		return nil
	}
	got := map[string]error{}
	on(func() {
		got["chmod layer"] = unix.Chmod(inLayer, 0o4755)
		got["chmod elsewhere"] = unix.Chmod(elsewhere, 0o4755)
		got["chmod link"] = unix.Chmod(link, 0o4755)
		got["nofollow link"] = fchmodat2(unix.AT_FDCWD, link, 0o4755, unix.AT_SYMLINK_NOFOLLOW)
		got["missing"] = unix.Chmod(filepath.Join(layer, "missing"), 0o4755)
		got["bad fd"] = unix.Fchmod(999, 0o4755)
		if fd, err := unix.Open(inLayer2, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			got["fchmod layer"] = unix.Fchmod(fd, 0o2755)
			unix.Close(fd)
		}
		if fd, err := unix.Open(inLayer3, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
			got["fchmod O_PATH"] = unix.Fchmod(fd, 0o4755)
			got["empty path"] = fchmodat2(fd, "", 0o4755, unix.AT_EMPTY_PATH)
			unix.Close(fd)
		}
	})
	on(func() {
		// This thread only (raw calls): fsuid 1000, no capabilities.
		unix.RawSyscall(unix.SYS_SETFSUID, 1000, 0, 0)
		if err := capset(0, 0, 0); err != nil {
			got["unprivileged"] = err
			return
		}
		got["unprivileged"] = unix.Chmod(inLayer3, 0o2755)
		got["unprivileged, closed directory"] = unix.Chmod(inClosed, 0o4755)
	})
	for name, want := range map[string]error{
		"chmod layer": nil, "chmod elsewhere": unix.EPERM, "chmod link": unix.EPERM,
		"nofollow link": unix.EOPNOTSUPP, "missing": unix.ENOENT, "bad fd": unix.EBADF,
		"fchmod layer": nil, "fchmod O_PATH": unix.EBADF, "empty path": nil, "unprivileged": unix.EPERM,
		"unprivileged, closed directory": unix.EACCES,
	} {
		if err := got[name]; (want == nil && err != nil) || !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	for path, want := range map[string]uint32{inLayer: 0o4755, inLayer2: 0o2755, inLayer3: 0o4755, inClosed: 0o755, elsewhere: 0o755} {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != want {
			t.Errorf("%s: mode %o, want %o", path, st.Mode&0o7777, want)
		}
	}
}

// TestStartRefusesApartOnTheLayer: a path that must lie apart from the
// layer (the workspace) but is on its mount stops Start.
func TestStartRefusesApartOnTheLayer(t *testing.T) {
	dir := t.TempDir()
	if _, err := Start(Config{Layer: dir, Apart: []string{dir}, Proc: "/proc"}); err == nil {
		t.Fatal("Start accepted a workspace on the layer's mount")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
