package commandview

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runbox/runbox/internal/ownthread"
	"golang.org/x/sys/unix"
)

// needRoot skips unless the test can make namespaces and mounts.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("building a view needs root (CAP_SYS_ADMIN): run the tests as root (CI does)")
	}
}

// onThread runs f on a fresh OS thread that is thrown away afterwards (the
// view it may build dies with it).
func onThread(f func() error) error {
	done := make(chan error, 1)
	ownthread.Go(func() { done <- f() })
	return <-done
}

// shell runs script with /bin/sh, forked from the calling thread, and
// returns its combined output and exit status.
func shell(script string) (string, int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", 0, err
	}
	defer r.Close()
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", script}, &syscall.ProcAttr{
		Env:   []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files: []uintptr{0, w.Fd(), w.Fd()},
	})
	w.Close()
	if err != nil {
		return "", 0, err
	}
	out := new(strings.Builder)
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return out.String(), 0, err
	}
	return out.String(), ws.ExitStatus(), nil
}

// TestEnterHidesDirectory: a process forked from a thread that entered the
// view finds the hidden directory empty and read-only, though a file and a
// mount lie under it, cannot unmount what covers it, holds none of the
// dropped capabilities, and cannot make a user namespace; the rest of the
// process, and the host, still see the directory as it is.
func TestEnterHidesDirectory(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	sub := filepath.Join(private, "run")
	for _, d := range []string{private, sub} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(private, "runboxd"), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "spill"), []byte("output"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A mount under the hidden directory, as docker's bind mount of the
	// socket directory is, in a namespace of the test's own.
	var out string
	var code int
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			return err
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(sub, "runboxd.sock"), nil, 0o600); err != nil {
			return err
		}
		if err := Enter(Spec{Hide: []string{private}, ReadOnly: []string{state}, KeepCaps: DockerDefaultCaps, Filter: true}); err != nil {
			return err
		}
		var err error
		out, code, err = shell(`
			echo "ls:$(ls -A ` + private + `)"
			touch ` + private + `/x 2>/dev/null && echo writable
			umount ` + private + ` 2>/dev/null && echo unmounted
			umount -l ` + private + ` 2>/dev/null && echo unmounted
			echo "state:$(cat ` + state + `/spill)"
			rm -f ` + state + `/spill 2>/dev/null && echo state-writable
			ln -s / ` + state + `/link 2>/dev/null && echo state-writable
			grep CapBnd /proc/self/status
			unshare -U true 2>/dev/null && echo userns
			unshare -m true 2>/dev/null && echo mountns
			exit 0`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in the view (exit %d):\n%s", code, out)
	if !strings.Contains(out, "state:output\n") {
		t.Errorf("in the view the read-only state directory cannot be read:\n%s", out)
	}
	for _, bad := range []string{"writable", "unmounted", "userns", "mountns"} {
		if strings.Contains(out, bad) {
			t.Errorf("in the view: %s", bad)
		}
	}
	if !strings.Contains(out, "ls:\n") {
		t.Errorf("in the view the hidden directory is not empty:\n%s", out)
	}
	if !strings.Contains(out, "CapBnd:\t00000000280425fb") {
		t.Errorf("in the view the bounding set is not Docker's default less CAP_SETFCAP (00000000280425fb):\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(private, "runboxd")); err != nil || string(b) != "binary" {
		t.Errorf("outside the view the hidden directory changed: %q, %v", b, err)
	}
}

// TestEnterFailsLoudly: Enter refuses a hidden path that is missing or
// relative, and a thread without CAP_SYS_ADMIN, with an error that names
// the cause.
func TestEnterFailsLoudly(t *testing.T) {
	needRoot(t)
	if err := onThread(func() error { return Enter(Spec{Hide: []string{"/no/such/dir"}}) }); err == nil || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Errorf("hiding a missing directory: %v; want an error naming it", err)
	}
	if err := onThread(func() error { return Enter(Spec{Hide: []string{"relative"}}) }); err == nil {
		t.Error("hiding a relative path: no error")
	}
	err := onThread(func() error {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		data[0].Effective &^= 1 << unix.CAP_SYS_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return err
		}
		return Enter(Spec{Hide: []string{t.TempDir()}})
	})
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
		t.Errorf("without CAP_SYS_ADMIN: %v; want EPERM naming the capability", err)
	}
}
