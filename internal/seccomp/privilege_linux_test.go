package seccomp

import (
	"errors"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/runbox/runbox/internal/ownthread"
	"golang.org/x/sys/unix"
)

// TestPrivilegeRules: under PrivilegeRules, every call that would give a
// file the setuid or setgid bit is refused, the same calls without them
// work, a non-creating open ignores its (garbage) mode, and openat2 answers
// ENOSYS.
func TestPrivilegeRules(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	if err := unix.Mkdir(p("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	type probe = struct {
		name string
		want error
		call func() error
	}
	cwd := unix.AT_FDCWD
	fd := func(fd int, err error) error {
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	probes := []probe{
		{"openat(O_CREAT, 0755)", nil, func() error { return fd(unix.Open(p("f"), unix.O_CREAT|unix.O_WRONLY, 0o755)) }},
		{"openat(O_CREAT, 04755)", unix.EPERM, func() error { return fd(unix.Open(p("g"), unix.O_CREAT|unix.O_WRONLY, 0o4755)) }},
		{"openat(O_CREAT, 02755)", unix.EPERM, func() error { return fd(unix.Open(p("g"), unix.O_CREAT|unix.O_WRONLY, 0o2755)) }},
		{"openat(O_TMPFILE, 04755)", unix.EPERM, func() error { return fd(unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY, 0o4755)) }},
		{"openat(O_RDONLY, garbage 04755)", nil, func() error { return fd(unix.Open(p("f"), unix.O_RDONLY, 0o4755)) }},
		{"openat(O_DIRECTORY, garbage 06755)", nil, func() error { return fd(unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0o6755)) }},
		{"fchmodat(0755)", nil, func() error { return unix.Fchmodat(unix.AT_FDCWD, p("f"), 0o755, 0) }},
		{"fchmodat(04755)", unix.EPERM, func() error { return unix.Fchmodat(unix.AT_FDCWD, p("f"), 0o4755, 0) }},
		{"fchmodat(02755)", unix.EPERM, func() error { return unix.Fchmodat(unix.AT_FDCWD, p("f"), 0o2755, 0) }},
		{"fchmodat2(04755)", unix.EPERM, func() error {
			_, _, e := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(cwd), uintptr(unsafePath(p("f"))), 0o4755, 0, 0, 0)
			return errnoErr(e)
		}},
		{"fchmod(04755)", unix.EPERM, func() error {
			f, err := unix.Open(p("f"), unix.O_RDONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(f)
			return unix.Fchmod(f, 0o4755)
		}},
		{"mkdirat(02755)", unix.EPERM, func() error { return unix.Mkdir(p("e"), 0o2755) }},
		{"mkdirat(0755)", nil, func() error { return unix.Mkdir(p("e2"), 0o755) }},
		{"mknodat(S_IFREG|04755)", unix.EPERM, func() error { return unix.Mknod(p("n"), unix.S_IFREG|0o4755, 0) }},
		{"openat2", unix.ENOSYS, func() error {
			return fd(unix.Openat2(unix.AT_FDCWD, p("f"), &unix.OpenHow{Flags: unix.O_RDONLY}))
		}},
	}
	probes = append(probes, privilegeProbesArch(p)...)
	got := map[string]error{}
	done := make(chan error, 1)
	ownthread.Go(func() { // a thread of its own, which ends with it
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			done <- err
			return
		}
		if err := LoadPrivilegeFilter(); err != nil {
			done <- err
			return
		}
		for _, pr := range probes {
			got[pr.name] = pr.call()
		}
		done <- nil
	})
	if err := <-done; err != nil {
		t.Fatalf("install filter: %v", err)
	}
	for _, pr := range probes {
		err := got[pr.name]
		if pr.want == nil && err != nil {
			t.Errorf("%s: %v, want it allowed", pr.name, err)
		}
		if pr.want != nil && !errors.Is(err, pr.want) {
			t.Errorf("%s: %v, want %v", pr.name, err, pr.want)
		}
	}
}

// probeList are named calls and what each must answer (nil: allowed).
type probeList = []struct {
	name string
	want error
	call func() error
}

func unsafePath(s string) unsafe.Pointer {
	b, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return unsafe.Pointer(b)
}
