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
	// FuseServerLowerFD is a detached mount of the lower layer's own
	// filesystem (the host's root, without the mounts under it).
	FuseServerLowerFD = 4
	// FuseServerLayersFD is a detached mount of the sandbox's layers
	// directory (upper and work inside).
	FuseServerLayersFD = 5
	// FuseServerSnapshotsFD, open only when the server is given lowers,
	// is a detached, read-only mount of the directory holding the
	// snapshot layers the sandbox stands on.
	FuseServerSnapshotsFD = 6
)

// FuseServerLayersPath is where, in its own mount namespace, the FUSE
// server of a sandbox's root has the sandbox's layers directory: from the
// host, /proc/PID/root and this path reach the layers of a sandbox whose
// layers are mounted nowhere else (its own disk).
const FuseServerLayersPath = Scratch + "/layers"

// ExecFuseServer turns the calling process, which must run in a user and
// mount namespace of its own (the provider clones it so, with the
// sandbox's id map), into the server of a sandbox's FUSE root: it makes its
// mounts private, attaches the lower and layers trees it inherited beside
// each other in a private tmpfs at Scratch, and executes server
// (fuse-overlayfs) on the device with them as lower, upper and work
// directories (upper and work name them in the layers), with idmap as
// the server's uid and gid mappings, and the layers named in lowers (in
// the snapshot layers directory, FuseServerSnapshotsFD) stacked above the
// lower one. The
// server needs real paths (it resolves them), and the trees reach it
// though the directories above them on the host are closed to it. It
// returns only on failure.
func ExecFuseServer(server, upper, work, idmap string, lowers []string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("fuse server: make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", Scratch, "tmpfs", noSuidDevExec, "mode=700,size=64k"); err != nil {
		return fmt.Errorf("fuse server: scratch %s: %w", Scratch, err)
	}
	lower, layers, snapshots := filepath.Join(Scratch, "lower"), FuseServerLayersPath, filepath.Join(Scratch, "snapshots")
	trees := []struct {
		fd int
		at string
	}{{FuseServerLowerFD, lower}, {FuseServerLayersFD, layers}}
	if len(lowers) > 0 {
		trees = append(trees, struct {
			fd int
			at string
		}{FuseServerSnapshotsFD, snapshots})
	}
	for _, t := range trees {
		if err := os.Mkdir(t.at, 0o700); err != nil {
			return fmt.Errorf("fuse server: %w", err)
		}
		if err := unix.MoveMount(t.fd, "", unix.AT_FDCWD, t.at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("fuse server: attach %s: %w", t.at, err)
		}
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
	// and every other sandbox made from it, on a read-only mount: a write
	// copies the file up, never changes it there.
	lowerdir := lower
	for i := len(lowers) - 1; i >= 0; i-- {
		lowerdir = filepath.Join(snapshots, lowers[i]) + ":" + lowerdir
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,uidmapping=%s,gidmapping=%s",
		lowerdir, filepath.Join(layers, upper), filepath.Join(layers, work), idmap, idmap)
	argv := []string{filepath.Base(server), "-f", "-o", opts, fmt.Sprintf("/dev/fd/%d", FuseServerDeviceFD)}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := syscall.Exec(server, argv, env); err != nil {
		return fmt.Errorf("fuse server: exec %s: %w", server, err)
	}
	return nil
}
