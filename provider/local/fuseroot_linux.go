package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/ownthread"
	"github.com/runbox/runbox/internal/procbox"
)

// FuseServer is the program that serves a local sandbox's root when it is
// the host's: an overlay of the host's root filesystem (read-only, below)
// and the sandbox's upper layer, through FUSE. Debian and Ubuntu package
// it as fuse-overlayfs.
const FuseServer = "fuse-overlayfs"

// ErrNoFuseServer means the host has no FuseServer, which a local sandbox
// on the host's root needs when runbox runs as root.
var ErrNoFuseServer = errors.New("local provider: " + FuseServer + " not found")

// findFuseServer returns the path of FuseServer, or an error that says how
// to get it.
func findFuseServer() (string, error) {
	path, err := exec.LookPath(FuseServer)
	if err != nil {
		return "", fmt.Errorf("%w: a local sandbox reads the host's root through it, as an unprivileged host user, so that root-only host files stay unreadable; install it (apt-get install fuse-overlayfs), or give the sandbox a root filesystem of its own (--rootfs DIR)", ErrNoFuseServer)
	}
	return path, nil
}

// overflowID is the id the kernel shows for a host id that a user
// namespace does not map (/proc/sys/kernel/overflowuid; 65534).
func overflowID() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/overflowuid")
	if err != nil {
		return 0, fmt.Errorf("overflow uid: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 || n >= MappedIDs {
		return 0, fmt.Errorf("overflow uid %q: want 1..%d to serve a sandbox's root", strings.TrimSpace(string(b)), MappedIDs-1)
	}
	return n, nil
}

// fuseIDMapping is FuseServer's id mapping (uidmapping/gidmapping) for a
// sandbox of size ids: the server runs in a user namespace with the
// sandbox's map, where every host id outside it (the host's root files',
// the host users') shows as the overflow id. Those are presented as the
// sandbox's root, and the sandbox's root is kept on disk as the overflow
// id in exchange; every other id is itself. So the host's files look root's
// inside, as they would on the host, while the server, a stranger to them,
// opens them with only what their "other" bits allow.
func fuseIDMapping(overflow, size int) string {
	var parts []string
	add := func(presented, onDisk, n int) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d:%d:%d", presented, onDisk, n))
		}
	}
	add(0, overflow, 1)
	add(1, 1, overflow-1)
	add(overflow, 0, 1)
	add(overflow+1, overflow+1, size-overflow-1)
	return strings.Join(parts, ":")
}

// makeFuseDevice makes, in the layers directory, the FUSE device node the
// jail opens (jail.FuseDevice), owned by the sandbox's root and closed to
// everyone else: the kernel wants a FUSE mount in a user namespace to use
// a device opened there, and the host's /dev/fuse may be root's alone.
func makeFuseDevice(layers string, m idMap) error {
	dev := filepath.Join(layers, jail.FuseDevice)
	if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 229))); err != nil {
		return fmt.Errorf("FUSE device node: %w", err)
	}
	if err := os.Lchown(dev, m.hostUID, m.hostGID); err != nil {
		return fmt.Errorf("FUSE device node: %w", err)
	}
	return nil
}

// receiveFuseDevice waits for the jail to send back its FUSE device, once
// mounted, on the configuration socket sock; exited closes when the jail
// has exited (it then never sends it).
func receiveFuseDevice(ctx context.Context, sock int, exited <-chan struct{}) (*os.File, error) {
	type result struct {
		fd  int
		err error
	}
	got := make(chan result, 1)
	go func() {
		buf := make([]byte, 16)
		oob := make([]byte, unix.CmsgSpace(4))
		for {
			n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				got <- result{-1, err}
				return
			}
			if n == 0 && oobn == 0 {
				got <- result{-1, io.ErrUnexpectedEOF}
				return
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err == nil && len(msgs) == 1 {
				if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
					got <- result{fds[0], nil}
					return
				}
			}
			got <- result{-1, errors.New("the jail sent no FUSE device")}
			return
		}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return nil, fmt.Errorf("FUSE device from the jail: %w (see the sandbox's log)", r.err)
		}
		return os.NewFile(uintptr(r.fd), "fuse"), nil
	case <-exited:
		return nil, errors.New("runboxd exited before mounting its root (see the sandbox's log)")
	case <-ctx.Done():
		return nil, fmt.Errorf("FUSE device from the jail: %w", ctx.Err())
	}
}

// fuseServerCmd returns the command that serves the sandbox's root on
// fuse (the jail's mounted device): runboxd's fuse-root mode, which attaches
// layers (a detached clone of the sandbox's layers directory) beside the
// trees startFuseServer prepared and executes server on them. It runs in a
// user namespace of its own with the sandbox's map, as its root with no
// supplementary groups, so it has power over the sandbox's ids (its upper
// layer) and none over any host id: it reads the host's files as a
// stranger. It runs outside the sandbox's pid namespace, so no command can
// signal it. lowers names the snapshot layers the sandbox stands on.
// runboxd's binary (5) is closed by runboxd as it starts.
func fuseServerCmd(runboxd *os.File, server string, fuse, layers *os.File, m idMap, lowers []string, log io.Writer) *exec.Cmd {
	cmd := &exec.Cmd{
		Path: "/proc/self/fd/5",
		Args: []string{"runboxd", "fuse-root", "--server", server, "--upper", upperDir, "--work", workDir,
			"--idmap", fuseIDMapping(m.swapped, m.size), "--lowers", strings.Join(lowers, ",")},
		Dir:    "/",
		Env:    []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Stdout: log,
		Stderr: log,
		// 3, 4 (jail.FuseServerDeviceFD, jail.FuseServerLayersFD), 5
		ExtraFiles: []*os.File{fuse, layers, runboxd},
	}
	uids, gids := m.sysProcIDMaps()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:                     true,
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                uids,
		GidMappings:                gids,
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
	}
	return cmd
}

// startFuseServer starts cmd (fuseServerCmd's) from a mount namespace of
// its own thread's, where lower and snapshots (nil when the sandbox stands
// on no snapshot) are attached read-only (jail.AttachFuseServerTrees).
// That namespace belongs to this process's user namespace and cmd clones
// one of its own, so the server gets those mounts locked: taken over, it
// still cannot make the snapshot layers that other sandboxes share
// writable, nor the host's root. The thread is not given back: it ends,
// and its namespace with it, when the goroutine that started cmd does.
// The same thread first enters the sandbox's cgroup for its FUSE server
// (see sandboxCgroups.enterFuseServerGroup), so that cmd starts there and
// never serves a request outside it, and leaves it once cmd has started.
func startFuseServer(cmd *exec.Cmd, lower, snapshots *os.File, m idMap, cg *sandboxCgroups) (*procbox.Detached, error) {
	type started struct {
		srv *procbox.Detached
		err error
	}
	done := make(chan started, 1)
	// A thread of its own, which ends with the goroutine, mount namespace
	// and all (never the main thread, which would keep both for good).
	ownthread.Go(func() {
		leaveCgroup, err := cg.enterFuseServerGroup(cmd.SysProcAttr)
		if err != nil {
			done <- started{err: err}
			return
		}
		defer leaveCgroup() // on the failures below (twice is harmless)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- started{err: fmt.Errorf("a mount namespace for %s: %w", FuseServer, err)}
			return
		}
		if err := jail.AttachFuseServerTrees(lower, snapshots, m.hostUID, m.hostGID); err != nil {
			done <- started{err: err}
			return
		}
		srv, err := procbox.StartDetached(cmd)
		leaveCgroup()
		done <- started{srv, err}
	})
	r := <-done
	return r.srv, r.err
}

// hostRootTree returns a detached clone of the mount of the host's root
// (without the mounts under it: /proc, /run, other filesystems), not
// id-mapped: the FUSE server reads it as the stranger it is, on a
// read-only, locked mount (startFuseServer).
func hostRootTree() (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("clone the mount of /: %w", err)
	}
	return os.NewFile(uintptr(fd), "lower"), nil
}

// snapshotTree returns a detached clone of the mount of dir (a sandbox's
// snapshot layers directory): the layers in it are hard links to the
// snapshot's files, shared with every sandbox made from it, so the FUSE
// server must never write them (startFuseServer gives it the clone
// read-only and locked). A write in the sandbox copies the file up into
// its own upper layer.
func snapshotTree(dir string) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("clone the mount of %s: %w", dir, err)
	}
	return os.NewFile(uintptr(fd), "snapshots"), nil
}
