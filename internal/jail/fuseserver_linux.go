package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Descriptors a FUSE root's server process starts with (see ExecFuseServer).
const (
	// FuseServerDeviceFD is the jail's FUSE device, mounted.
	FuseServerDeviceFD = 3
	// FuseServerLayersFD is a detached mount of the sandbox's layers
	// directory (upper and work inside).
	FuseServerLayersFD = 4
)

// Where, in its own mount namespace, the FUSE server of a sandbox's root
// finds the trees it serves (see AttachFuseServerTrees).
const (
	// FuseServerLowerPath is the lower layer's own filesystem (the
	// host's root, without the mounts under it), read-only.
	FuseServerLowerPath = Scratch + "/lower"
	// FuseServerSnapshotsPath is the directory holding the snapshot layers
	// the sandbox stands on, read-only; there only when it stands on one.
	FuseServerSnapshotsPath = Scratch + "/snapshots"
	// FuseServerLayersPath is the sandbox's layers directory: from the
	// host, /proc/PID/root and this path reach the layers of a sandbox
	// whose layers are mounted nowhere else (its own disk).
	FuseServerLayersPath = Scratch + "/layers"
)

// AttachFuseServerTrees prepares the mount namespace that a FUSE root's
// server is cloned from, which must be a private one of the calling
// thread's own: a tmpfs at Scratch owned by uid and gid (the server's root
// on the host), with lower (a detached clone of the host root's mount)
// and, when not nil, snapshots (a detached clone of the sandbox's snapshot
// layers directory) attached at FuseServerLowerPath and
// FuseServerSnapshotsPath, both read-only, without setuid or devices, and
// an empty FuseServerLayersPath for the server to attach its own layers
// on. The server is cloned in a user namespace of its own, so the kernel
// copies these mounts into its mount namespace locked (mount_namespaces(7),
// "Restrictions on mount namespaces"): not even the server, root of its
// user namespace, can make them writable, allow setuid or devices on them,
// or unmount them. The snapshot layers are shared with the snapshot and
// every sandbox made from it; a server taken over through what a
// sandbox's commands send it still cannot change them.
func AttachFuseServerTrees(lower, snapshots *os.File, uid, gid int) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("fuse server trees: make mounts private: %w", err)
	}
	opts := fmt.Sprintf("mode=700,size=64k,uid=%d,gid=%d", uid, gid)
	if err := unix.Mount("tmpfs", Scratch, "tmpfs", noSuidDevExec, opts); err != nil {
		return fmt.Errorf("fuse server trees: scratch %s: %w", Scratch, err)
	}
	trees := []struct {
		tree *os.File
		at   string
	}{{lower, FuseServerLowerPath}, {snapshots, FuseServerSnapshotsPath}}
	for _, t := range trees {
		if t.tree == nil {
			continue
		}
		if err := os.Mkdir(t.at, 0o700); err != nil {
			return fmt.Errorf("fuse server trees: %w", err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if err := unix.MountSetattr(int(t.tree.Fd()), "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fmt.Errorf("fuse server trees: make %s read-only: %w", t.at, err)
		}
		if err := unix.MoveMount(int(t.tree.Fd()), "", unix.AT_FDCWD, t.at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("fuse server trees: attach %s: %w", t.at, err)
		}
	}
	if err := os.Mkdir(FuseServerLayersPath, 0o700); err != nil {
		return fmt.Errorf("fuse server trees: %w", err)
	}
	return nil
}

// ExecFuseServer turns the calling process into the server of a sandbox's
// FUSE root. The process must run in a user and mount namespace of its
// own (the provider clones it so, with the sandbox's id map) cloned from
// one that AttachFuseServerTrees prepared. It attaches the sandbox's
// layers (FuseServerLayersFD) at FuseServerLayersPath and executes server
// (fuse-overlayfs) on the device with the lower tree as lower directory,
// upper and work (names in the layers) as upper and work directories,
// idmap as the server's uid and gid mappings, and the layers named in
// lowers (in FuseServerSnapshotsPath) stacked above the lower one. The
// server needs real paths (it resolves them), and the trees reach it
// though the directories above them on the host are closed to it. It
// returns only on failure.
func ExecFuseServer(server, upper, work, idmap string, lowers []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("fuse server: make mounts private: %w", err)
	}
	need := []string{FuseServerLowerPath, FuseServerLayersPath}
	if len(lowers) > 0 {
		need = append(need, FuseServerSnapshotsPath)
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("fuse server: %w: it starts from the mount namespace the local provider prepares for it", err)
		}
	}
	if err := unix.MoveMount(FuseServerLayersFD, "", unix.AT_FDCWD, FuseServerLayersPath, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("fuse server: attach %s: %w", FuseServerLayersPath, err)
	}
	// Only the device crosses into the server. Marked, not closed: the Go
	// runtime's own descriptors (its poller's) are among them, and closing
	// those under it crashed this process now and then.
	if err := unix.CloseRange(FuseServerDeviceFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("fuse server: close inherited descriptors: %w", err)
	}
	if _, err := unix.FcntlInt(FuseServerDeviceFD, unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("fuse server: device descriptor: %w", err)
	}
	// Layers named in lowers (a snapshot's) stack, in order, above the
	// lower layer and under the upper. They are shared with the snapshot
	// and every other sandbox made from it, on a locked read-only mount: a
	// write copies the file up, never changes it there.
	lowerdir := FuseServerLowerPath
	for i := len(lowers) - 1; i >= 0; i-- {
		lowerdir = filepath.Join(FuseServerSnapshotsPath, lowers[i]) + ":" + lowerdir
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,uidmapping=%s,gidmapping=%s",
		lowerdir, filepath.Join(FuseServerLayersPath, upper), filepath.Join(FuseServerLayersPath, work), idmap, idmap)
	argv := []string{filepath.Base(server), "-f", "-o", opts, fmt.Sprintf("/dev/fd/%d", FuseServerDeviceFD)}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := syscall.Exec(server, argv, env); err != nil {
		return fmt.Errorf("fuse server: exec %s: %w", server, err)
	}
	return nil
}
