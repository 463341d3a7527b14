package seccomp

import (
	"errors"
	"testing"

	"github.com/runbox/runbox/internal/ownthread"
	"golang.org/x/sys/unix"
)

// onFilteredThread runs probe on an OS thread that has no_new_privs and the
// filter (that thread only), and throws the thread away afterwards.
func onFilteredThread(t *testing.T, probe func() map[string]error) map[string]error {
	t.Helper()
	type result struct {
		errs map[string]error
		err  error
	}
	done := make(chan result, 1)
	ownthread.Go(func() { // a thread of its own, which ends with it
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			done <- result{err: err}
			return
		}
		if err := Load(Filter(), 0); err != nil {
			done <- result{err: err}
			return
		}
		done <- result{errs: probe()}
	})
	r := <-done
	if r.err != nil {
		t.Fatalf("install filter: %v", r.err)
	}
	return r.errs
}

// calls are the probes: each makes one call the filter must refuse, in a
// form that would do no harm if it were allowed.
func calls() map[string]error {
	_, _, e1 := unix.Syscall(unix.SYS_BPF, 0xffff, 0, 0) // an invalid bpf command
	keyctl := func() error {
		_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
		return err
	}
	_, _, e2 := unix.Syscall(unix.SYS_PERF_EVENT_OPEN, 0, 0, 0)
	return map[string]error{
		"bpf":             errnoErr(e1),
		"keyctl":          keyctl(),
		"perf_event_open": errnoErr(e2),
		"mount":           unix.Mount("none", "/nonexistent-runbox-probe", "tmpfs", 0, ""),
		"unshare(user)":   unix.Unshare(unix.CLONE_NEWUSER),
		"setns":           unix.Setns(-1, 0),
		"umount2":         unix.Unmount("/nonexistent-runbox-probe", 0),
	}
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func TestFilterRefusesHostReachingCalls(t *testing.T) {
	got := onFilteredThread(t, calls)
	for name, err := range got {
		if !errors.Is(err, DeniedErrno) {
			t.Errorf("%s under the filter: got %v, want %v", name, err, DeniedErrno)
		}
	}
}

// The same probes without the filter fail differently (or succeed): the
// test above sees the filter's answer, not the kernel's own refusal.
func TestProbesWithoutFilterAreNotRefusedByPermission(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("needs root: as another user the kernel itself answers EPERM to some probes; run the tests as root (CI does)")
	}
	for name, err := range calls() {
		if errors.Is(err, DeniedErrno) {
			t.Errorf("%s without the filter: got %v; the probe cannot tell the filter's refusal from the kernel's", name, err)
		}
	}
}

func TestFilterAllowsOrdinaryCalls(t *testing.T) {
	got := onFilteredThread(t, func() map[string]error {
		_, err := unix.Getpid(), error(nil)
		var st unix.Stat_t
		pipe := make([]int, 2)
		return map[string]error{
			"getpid":          err,
			"stat":            unix.Stat("/", &st),
			"pipe2":           unix.Pipe2(pipe, unix.O_CLOEXEC),
			"unshare(files)":  unix.Unshare(unix.CLONE_FILES),
			"prctl(dumpable)": unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0),
		}
	})
	for name, err := range got {
		if err != nil {
			t.Errorf("%s under the filter: %v", name, err)
		}
	}
}
