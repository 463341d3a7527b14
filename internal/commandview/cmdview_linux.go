package commandview

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/mountinfo"
)

// Spec says what the commands' view hides and withholds.
type Spec struct {
	// Hide are absolute paths of directories that commands see empty and
	// read-only; every mount at or below each is detached in the view.
	Hide []string
	// ReadOnly are absolute paths of directories that commands see as they
	// are but cannot change: the daemon's state that commands read (spill
	// files, session functions). Each is bind-mounted read-only onto
	// itself in the view.
	ReadOnly []string
	// KeepCaps are the only capabilities a command may ever hold (its
	// bounding set); nil keeps the thread's. DockerDefaultCaps is what a
	// container gets from Docker by default.
	KeepCaps []uintptr
	// Filter installs DockerParityFilter on the thread: the system calls
	// Docker's default seccomp profile refuses a container without
	// CAP_SYS_ADMIN are refused to commands too, whatever the container's
	// own profile allows because runboxd was given that capability.
	Filter bool
	// Clone3 keeps clone3 allowed under Filter (Docker answers ENOSYS to a
	// container without CAP_SYS_ADMIN): a supervisor that forks straight
	// into cgroups (CLONE_INTO_CGROUP) needs it.
	Clone3 bool
}

// DockerDefaultCaps are the capabilities Docker gives a container by
// default (moby's oci/caps DefaultCapabilities) less CAP_SETFCAP: a file
// capability set on a bind-mounted workspace, where container root is host
// root, would take effect on the host (security rule 4).
var DockerDefaultCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FSETID, unix.CAP_FOWNER,
	unix.CAP_MKNOD, unix.CAP_NET_RAW, unix.CAP_SETGID, unix.CAP_SETUID,
	unix.CAP_SETPCAP, unix.CAP_NET_BIND_SERVICE,
	unix.CAP_SYS_CHROOT, unix.CAP_KILL, unix.CAP_AUDIT_WRITE,
}

// ErrNotLocked is returned by Enter when it would change a thread other
// goroutines may run on.
var ErrNotLocked = errors.New("commandview: Enter needs a goroutine locked to a thread of its own (runtime.LockOSThread) that is never unlocked")

// Enter makes the calling OS thread the place commands are forked from: it
// moves the thread into a mount namespace of its own (unshare CLONE_FS |
// CLONE_NEWNS), makes every mount in it private, hides spec.Hide under
// empty read-only tmpfs mounts, drops every capability not in
// spec.KeepCaps from the thread's bounding and inheritable sets (and
// clears its ambient set), and installs the filter. The caller must have
// locked its goroutine to the thread (runtime.LockOSThread) and never
// unlock it, so the thread ends with the goroutine. It needs CAP_SYS_ADMIN
// and CAP_SETPCAP; any failure is returned, and the thread must then not
// be used to start commands.
func Enter(spec Spec) error {
	if unix.Gettid() == unix.Getpid() {
		// The main thread is never ended by the runtime.
		return ErrNotLocked
	}
	for _, dir := range append(spec.Hide, spec.ReadOnly...) {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" {
			return fmt.Errorf("commandview: cannot hide %q or make it read-only: want an absolute directory other than /", dir)
		}
	}
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("commandview: new mount namespace (unshare needs CAP_SYS_ADMIN): %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("commandview: make mounts private (mount needs CAP_SYS_ADMIN, and no LSM such as AppArmor's docker-default denying it): %w", err)
	}
	for _, dir := range spec.Hide {
		if err := hide(filepath.Clean(dir)); err != nil {
			return err
		}
	}
	for _, dir := range spec.ReadOnly {
		if err := readOnly(filepath.Clean(dir)); err != nil {
			return err
		}
	}
	if spec.KeepCaps != nil {
		if err := dropCaps(spec.KeepCaps); err != nil {
			return err
		}
	}
	if spec.Filter {
		if err := loadFilter(DockerParityFilter(spec.Clone3)); err != nil {
			return err
		}
	}
	return nil
}

// hide detaches every mount at or below dir in the thread's namespace, then
// covers dir with an empty read-only tmpfs, and checks that it is empty.
func hide(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("commandview: hide %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("commandview: hide %s: not a directory", dir)
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("commandview: hide %s: detach %s: %w", dir, m, err)
		}
	}
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "size=4k,nr_inodes=16,mode=0755"); err != nil {
		return fmt.Errorf("commandview: hide %s: mount an empty tmpfs over it: %w", dir, err)
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) > 0 {
		return fmt.Errorf("commandview: hide %s: still shows %d entries (%v)", dir, len(left), err)
	}
	return nil
}

// readOnly bind-mounts dir onto itself, read-only, in the thread's
// namespace.
func readOnly(dir string) error {
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("commandview: make %s read-only: %w", dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("commandview: make %s read-only: not a directory", dir)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("commandview: make %s read-only: bind it: %w", dir, err)
	}
	const flags = unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("commandview: make %s read-only: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir in the calling
// thread's mount namespace, deepest first.
func mountsUnder(dir string) ([]string, error) {
	// thread-self: the thread's namespace, not the main thread's.
	data, err := os.ReadFile("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("commandview: read mountinfo: %w", err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ...
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := mountinfo.Unescape(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out), nil
}

// dropCaps removes every capability not in keep from the calling thread's
// bounding and inheritable sets and clears its ambient set. A root command
// then gets at most keep on execve; the thread itself keeps its permitted
// and effective sets, so no command is more privileged than it and none
// may ptrace it.
func dropCaps(keep []uintptr) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	var drop []uintptr
	for c := uintptr(0); c <= last; c++ {
		if !slices.Contains(keep, c) {
			drop = append(drop, c)
		}
	}
	for _, c := range drop {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("commandview: drop capability %d from the bounding set (needs CAP_SETPCAP): %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("commandview: read capabilities: %w", err)
	}
	for _, c := range drop {
		data[c/32].Inheritable &^= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("commandview: clear inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("commandview: clear ambient capabilities: %w", err)
	}
	return nil
}

// lastCap is the highest capability number the kernel knows.
func lastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("commandview: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("commandview: /proc/sys/kernel/cap_last_cap says %q", b)
	}
	return uintptr(n), nil
}

// Undumpable makes the process non-dumpable: its /proc files (root, cwd,
// exe, fd, environ, mem) and ptrace then need CAP_SYS_PTRACE, which a
// container's commands do not have, whatever uid they run as. Commands are
// dumpable again once they execve.
func Undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("commandview: make the process non-dumpable: %w", err)
	}
	return nil
}
