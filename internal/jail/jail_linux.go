package jail

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Entered is what Enter leaves the process that serves the sandbox.
type Entered struct {
	// Listener listens on the API socket (made before the pivot).
	Listener net.Listener
	// CgroupDir reaches the sandbox's cgroup v2 tree writable, through a
	// descriptor of this process ("/proc/self/fd/N"): no path in the
	// sandbox does, commands see the tree read-only, so they cannot move
	// themselves out of the cgroups runboxd puts them in. Empty where the
	// sandbox has no cgroup v2 tree.
	CgroupDir string
}

// Enter builds the sandbox's root filesystem from cfg, listens on cfg.Socket
// (through listen, called while the host's filesystem is still visible),
// pivots into the new root and sets the hostname, the environment and the
// loopback interface. It must run in a process that has its own mount
// namespace, before anything else starts in it. Commands cannot reach its
// descriptors through /proc/1/fd: the kernel refuses that to a process
// with fewer capabilities and no CAP_SYS_PTRACE (see DropCapabilities), and
// Enter makes the process non-dumpable as well. Failures name the step.
func Enter(cfg Config, listen func(path string) (net.Listener, error)) (*Entered, error) {
	// Nothing this process mounts may leak back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("jail: make mounts private: %w", err)
	}
	root := cfg.Merged
	// The workspace is opened by its host path before attachTrees covers
	// Scratch (/tmp) with a tmpfs: a workspace under the host's /tmp
	// (--host-root with a disk bound) stays reachable through this handle.
	if cfg.Workspace != "" && cfg.WorkspaceTreeFD <= 0 {
		fd, err := openWorkspace(cfg)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		cfg.workspaceFD = fd
	}
	if err := attachTrees(&cfg); err != nil {
		return nil, err
	}
	err := mountRoot(cfg)
	if cfg.ReplyFD > 0 {
		unix.Close(cfg.ReplyFD)
	}
	if err != nil {
		return nil, err
	}
	cgroupFD, err := mountSystem(root, cfg.TmpSize)
	if err != nil {
		return nil, err
	}
	entered := &Entered{}
	if cgroupFD >= 0 {
		entered.CgroupDir = fmt.Sprintf("/proc/self/fd/%d", cgroupFD)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("jail: make runboxd non-dumpable: %w", err)
	}
	if cfg.UserNS {
		// Written before /proc/sys turns read-only; the count is checked at
		// every level up, so nothing in the sandbox can make a user
		// namespace (clone3's flags are beyond a seccomp filter's sight).
		if err := os.WriteFile(filepath.Join(root, "proc/sys/user/max_user_namespaces"), []byte("0\n"), 0); err != nil {
			return nil, fmt.Errorf("jail: cap nested user namespaces: %w", err)
		}
	}
	if err := maskProc(filepath.Join(root, "proc")); err != nil {
		return nil, err
	}
	if !cfg.NetworkNone && cfg.Lower == "/" {
		copyResolvConf("/etc/resolv.conf", root)
	}
	if err := hideHost(cfg, root); err != nil {
		return nil, err
	}
	if err := mountWorkspace(cfg, root); err != nil {
		return nil, err
	}
	for _, m := range cfg.Mask {
		if err := mask(filepath.Join(root, m)); err != nil {
			return nil, fmt.Errorf("jail: hide %s: %w", m, err)
		}
		if rel, ok := under(cfg.Workspace, m); ok {
			if err := mask(filepath.Join(root, WorkspacePath, rel)); err != nil {
				return nil, fmt.Errorf("jail: hide %s in the workspace: %w", m, err)
			}
		}
	}
	ln, err := listen(cfg.Socket)
	if err != nil {
		return nil, err
	}
	entered.Listener = ln
	if err := pivot(root); err != nil {
		ln.Close()
		return nil, err
	}
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			ln.Close()
			return nil, fmt.Errorf("jail: hostname: %w", err)
		}
	}
	if cfg.NetworkNone {
		if err := loopbackUp(); err != nil {
			ln.Close()
			return nil, fmt.Errorf("jail: loopback: %w", err)
		}
	}
	os.Clearenv()
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	return entered, nil
}

// mountRoot mounts the overlay of cfg.Upper on cfg.Lower at cfg.Merged.
//
// In a user namespace the kernel refuses an overlay whose lower layer has
// mounts under it (they are locked to this namespace), which the host's
// root always has. Then the root is a tmpfs holding one overlay per
// top-level directory that has none (/usr, /etc, ... stay writable), and a
// read-only bind of each one that does.
//
// With FuseRoot, the root is a FUSE overlay (see mountFuseRoot).
//
// With a LowerTree (the provider's id-mapped clone of the lower's own
// mount, without the mounts under it), that tree is attached beside the
// upper layer and is the overlay's one lower layer.
func mountRoot(cfg Config) error {
	if cfg.FuseRoot {
		return mountFuseRoot(cfg)
	}
	if cfg.LowerTree {
		if err := overlay(scratchLower, cfg.Upper, cfg.Work, cfg.Merged, cfg.UserNS); err != nil {
			return fmt.Errorf("jail: overlay %s (lower %s, upper %s): %w", cfg.Merged, cfg.Lower, cfg.Upper, err)
		}
		return nil
	}
	err := overlay(cfg.Lower, cfg.Upper, cfg.Work, cfg.Merged, false)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("jail: overlay %s (lower %s, upper %s): %w", cfg.Merged, cfg.Lower, cfg.Upper, err)
	}
	if err := unix.Mount("tmpfs", cfg.Merged, "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("jail: root tmpfs: %w", err)
	}
	ents, err := os.ReadDir(cfg.Lower)
	if err != nil {
		return fmt.Errorf("jail: read %s: %w", cfg.Lower, err)
	}
	for _, e := range ents {
		name := e.Name()
		src, dst := filepath.Join(cfg.Lower, name), filepath.Join(cfg.Merged, name)
		switch {
		case e.Type()&os.ModeSymlink != 0:
			if target, err := os.Readlink(src); err == nil {
				_ = os.Symlink(target, dst)
			}
			continue
		case !e.IsDir():
			continue
		}
		switch name {
		case "proc", "sys", "dev", "tmp", "run": // fresh ones are mounted later
			if err := os.Mkdir(dst, 0o755); err != nil {
				return fmt.Errorf("jail: %s: %w", dst, err)
			}
			continue
		}
		up, work := filepath.Join(cfg.Upper, name), filepath.Join(cfg.Work, name)
		if err := overlay(src, up, work, dst, true); err == nil {
			continue
		}
		if err := bind(src, dst, unix.MS_RDONLY); err != nil {
			return fmt.Errorf("jail: bind %s: %w", src, err)
		}
	}
	return nil
}

// overlay mounts upper (with work) over lower at merged, creating the
// directories; userxattr is what an overlay in a user namespace needs.
func overlay(lower, upper, work, merged string, userxattr bool) error {
	for _, d := range []string{upper, work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
		escapeOverlay(lower), escapeOverlay(upper), escapeOverlay(work))
	if userxattr {
		opts += ",userxattr"
	}
	return unix.Mount("overlay", merged, "overlay", 0, opts)
}

// escapeOverlay escapes the characters overlayfs's option parser treats
// specially in a path.
func escapeOverlay(p string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`, `:`, `\:`).Replace(p)
}

// noSuidDevExec are the mount flags of the sandbox's system mounts (/proc,
// /dev/shm, /sys, the cgroup tree): no setuid, devices or programs there.
const noSuidDevExec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// devices are the host device nodes bind-mounted into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// mountSystem gives root a fresh /proc, a minimal /dev, a private /tmp
// (of tmpSize bytes when not 0), a
// read-only /sys where the kernel allows one, and where one exists the
// cgroup v2 tree rooted at the sandbox's cgroup (see mountCgroup2), whose
// writable descriptor it returns (-1 without one).
func mountSystem(root string, tmpSize int64) (int, error) {
	at := func(p string) string { return filepath.Join(root, p) }
	if err := mountDir("proc", at("/proc"), "proc", noSuidDevExec, ""); err != nil {
		return -1, fmt.Errorf("jail: /proc: %w", err)
	}
	if err := mountDir("tmpfs", at("/dev"), "tmpfs", unix.MS_NOSUID|unix.MS_STRICTATIME, "mode=755,size=65536k"); err != nil {
		return -1, fmt.Errorf("jail: /dev: %w", err)
	}
	for _, d := range devices {
		if err := bind("/dev/"+d, at("/dev/"+d), 0); err != nil {
			return -1, fmt.Errorf("jail: /dev/%s: %w", d, err)
		}
	}
	if err := mountDir("devpts", at("/dev/pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return -1, fmt.Errorf("jail: /dev/pts: %w", err)
	}
	links := map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	}
	for name, target := range links {
		if err := os.Symlink(target, at("/dev/"+name)); err != nil {
			return -1, fmt.Errorf("jail: /dev/%s: %w", name, err)
		}
	}
	if err := mountDir("shm", at("/dev/shm"), "tmpfs", noSuidDevExec, "mode=1777,size=65536k"); err != nil {
		return -1, fmt.Errorf("jail: /dev/shm: %w", err)
	}
	tmpOpts := "mode=1777"
	if tmpSize > 0 {
		tmpOpts += ",size=" + strconv.FormatInt(tmpSize, 10)
	}
	if err := mountDir("tmpfs", at("/tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return -1, fmt.Errorf("jail: /tmp: %w", err)
	}
	// A fresh sysfs needs a network namespace of the sandbox's own, or
	// real root; without one /sys is an empty tmpfs, read-only once the
	// cgroup tree is in it.
	sys := at("/sys")
	if err := mountDir("sysfs", sys, "sysfs", noSuidDevExec|unix.MS_RDONLY, ""); err != nil {
		if err := unix.Mount("tmpfs", sys, "tmpfs", noSuidDevExec, "mode=755,size=64k"); err != nil {
			return -1, nil
		}
		defer unix.Mount("", sys, "", unix.MS_REMOUNT|unix.MS_RDONLY|noSuidDevExec, "mode=755,size=64k")
	}
	cg := filepath.Join(sys, "fs/cgroup")
	if err := mountDir("tmpfs", cg, "tmpfs", noSuidDevExec, "mode=755"); err != nil {
		return -1, nil
	}
	fd, err := mountCgroup2(filepath.Join(cg, "unified"))
	if err != nil {
		return -1, nil // no cgroup v2 here: runboxd tracks execs through /proc
	}
	return fd, nil
}

// mountCgroup2 mounts the sandbox's cgroup v2 tree (inside its cgroup
// namespace, the sandbox's cgroup is the root) read-only at dir, and returns
// a descriptor of a writable mount of the same tree that no path reaches:
// it is mounted beside dir, opened, then detached. runboxd makes, fills and
// kills exec cgroups through the descriptor; commands, which see only dir,
// cannot write cgroup.procs to move themselves out of theirs.
func mountCgroup2(dir string) (int, error) {
	rw := dir + ".rw"
	if err := mountDir("cgroup2", rw, "cgroup2", noSuidDevExec, ""); err != nil {
		os.Remove(rw)
		return -1, err
	}
	fd, err := unix.Open(rw, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = os.Mkdir(dir, 0o755)
	}
	if err == nil {
		err = unix.Mount(rw, dir, "", unix.MS_BIND, "")
	}
	if err == nil {
		err = unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|noSuidDevExec, "")
	}
	if derr := unix.Unmount(rw, unix.MNT_DETACH); err == nil {
		err = derr
	}
	os.Remove(rw)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}

// Parts of /proc that reach past the sandbox (the kernel's memory, keys,
// sysrq, kernel parameters): hidden, or read-only, as container runtimes
// do. Without CAP_SYS_ADMIN (see DropCapabilities) no command can undo it.
var (
	procHiddenFiles = []string{"kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger", "latency_stats", "kallsyms", "kmsg"}
	procHiddenDirs  = []string{"acpi", "scsi"}
	procReadOnly    = []string{"sys", "irq", "bus", "fs"}
)

// maskProc hides or freezes the parts of the sandbox's /proc (at proc)
// that concern the whole machine.
func maskProc(proc string) error {
	for _, f := range procHiddenFiles {
		p := filepath.Join(proc, f)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("jail: hide /proc/%s: %w", f, err)
		}
	}
	for _, d := range procHiddenDirs {
		if err := mask(filepath.Join(proc, d)); err != nil {
			return fmt.Errorf("jail: hide /proc/%s: %w", d, err)
		}
	}
	for _, d := range procReadOnly {
		p := filepath.Join(proc, d)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := bind(p, p, unix.MS_RDONLY); err != nil {
			return fmt.Errorf("jail: /proc/%s read-only: %w", d, err)
		}
	}
	return nil
}

// keptCapabilities are the capabilities commands in a sandbox keep (what a
// container runtime's default keeps, less CAP_MKNOD: there is no device
// cgroup here to stop a block device from being made and mounted; and less
// CAP_SETFCAP: a file capability set in the id-mapped workspace would be
// the host's, as a setuid bit would, security rule 4).
var keptCapabilities = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FSETID, unix.CAP_FOWNER, unix.CAP_NET_RAW,
	unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP, unix.CAP_NET_BIND_SERVICE,
	unix.CAP_SYS_CHROOT, unix.CAP_KILL, unix.CAP_AUDIT_WRITE,
}

// DropCapabilities removes every other capability from the bounding set,
// so no command runboxd starts has it (runboxd itself keeps what it holds:
// it mounts nothing more, but makes cgroups and signals processes).
func DropCapabilities() error {
	for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
		if slices.Contains(keptCapabilities, c) {
			continue
		}
		// The bounding set is per thread, and a command may be forked from
		// any of the runtime's threads.
		if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); errno != 0 && errno != unix.EINVAL {
			return fmt.Errorf("jail: drop capability %d: %w", c, errno)
		}
	}
	return nil
}

// copyResolvConf gives the sandbox the host's resolver configuration (the
// file hostConf) as a file. On many hosts /etc/resolv.conf is a link into
// /run, a mount of its own that the overlay of the root does not show, so
// the link would dangle.
func copyResolvConf(hostConf, root string) {
	b, err := os.ReadFile(hostConf)
	if err != nil {
		return
	}
	dst := filepath.Join(root, "etc", "resolv.conf")
	fi, err := os.Lstat(dst)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return // a plain file (or none) is the sandbox's own business
	}
	target, err := os.Readlink(dst)
	if err != nil {
		return
	}
	// Where the link leads inside the sandbox's root, not the host's.
	if filepath.IsAbs(target) {
		target = filepath.Join(root, target)
	} else {
		target = filepath.Join(root, "etc", target)
	}
	if _, err := os.Stat(target); err == nil {
		return // it resolves in the sandbox too
	}
	_ = os.Remove(dst)
	_ = os.WriteFile(dst, b, 0o644)
}

// mountDir mounts source (of fstype) at target, creating target first.
func mountDir(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	return unix.Mount(source, target, fstype, flags, data)
}

// bind bind-mounts src at dst (a file or a directory, created to match),
// read-only with flags MS_RDONLY.
func bind(src, dst string, flags uintptr) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if flags&unix.MS_RDONLY != 0 {
		return unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_REC, "")
	}
	return nil
}

// mask hides dir behind an empty read-only tmpfs, if dir exists.
func mask(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=755")
}

// pivot makes root the process's root filesystem and lets go of the old one
// entirely, so no host mount stays reachable.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("jail: chdir %s: %w", root, err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one;
	// detaching "." then removes it (runc's trick: no temporary directory).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("jail: pivot_root %s: %w", root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("jail: detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("jail: chdir /: %w", err)
	}
	return nil
}

// loopbackUp sets the IFF_UP flag of lo.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return err
	}
	return nil
}

// ErrCgoBuild means runboxd was built with cgo. A jail changes every
// thread of runboxd at once (the capability bounding set, no_new_privs,
// the seccomp filter), which the Go runtime allows only in a program
// built without cgo.
var ErrCgoBuild = errors.New("this runboxd was built with cgo, and a jail must change every thread of runboxd at once, which Go allows only without cgo: build it with CGO_ENABLED=0 (CGO_ENABLED=0 go build ./cmd/runboxd)")

// RequireNoCgo returns ErrCgoBuild when this program was built with cgo.
func RequireNoCgo() error {
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0); errno == unix.ENOTSUP {
		return ErrCgoBuild
	}
	return nil
}

// ErrNotPID1 means Enter's caller is not the first process of its own pid
// namespace.
var ErrNotPID1 = errors.New("runboxd jail must be PID 1 of a new pid namespace")

// openWorkspace opens cfg.Workspace for a plain bind, following no link,
// and, when the provider said which directory it checked (WorkspaceDev,
// WorkspaceIno), refuses any other: the path is this mount namespace's
// copy of the host's, so the same directory has the same device and inode.
func openWorkspace(cfg Config) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, cfg.Workspace, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("jail: workspace %s: %w", cfg.Workspace, err)
	}
	if cfg.WorkspaceIno == 0 {
		return fd, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("jail: workspace %s: %w", cfg.Workspace, err)
	}
	if st.Dev != cfg.WorkspaceDev || st.Ino != cfg.WorkspaceIno {
		unix.Close(fd)
		return -1, fmt.Errorf("jail: workspace %s was replaced after it was checked (device %d inode %d, checked %d %d)",
			cfg.Workspace, st.Dev, st.Ino, cfg.WorkspaceDev, cfg.WorkspaceIno)
	}
	return fd, nil
}
