package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A local sandbox's disk bound, as root: its layers directory (the
// overlay's upper and work directories, its private /root and /home, the
// spill directory: everything it writes to disk outside its workspace) is
// the root of a filesystem of its own, an ext4 image file of the bounded
// size in its state directory, loop-mounted. Writing past the bound is
// ENOSPC in the sandbox and costs the host nothing more. The image is
// sparse: it takes on the host only what the sandbox wrote (and the
// filesystem's few hundred KiB of metadata).
//
// Why an image and not a quota on the home's filesystem: project quotas
// need a filesystem made or mounted with them (ext4 -O project, XFS
// pquota), which a host rarely has and runbox cannot turn on; a tmpfs
// would hold the writes in RAM. A loop device and mkfs.ext4 are on every
// Linux host.

// diskImage is the image's name in the sandbox's state directory.
const diskImage = "disk.img"

// MinDisk is the smallest disk bound a local sandbox takes: room for
// ext4's own metadata and the copies of the host's password files.
const MinDisk = 16 << 20

// ErrNoMkfs means the host has no mkfs.ext4, which a local sandbox's disk
// image needs (its bound's, or a FUSE root's with none).
var ErrNoMkfs = errors.New("local provider: mkfs.ext4 not found")

// ErrLimitUnsupported means the spec asks for a limit the local provider
// cannot enforce where it runs (a disk bound without root): the sandbox is
// refused rather than made without it. It matches errors.ErrUnsupported.
var ErrLimitUnsupported = fmt.Errorf("the local provider cannot enforce this limit here: %w", errors.ErrUnsupported)

// mkfsArgs make a filesystem that is cheap to make and to throw away:
// no journal (the image never outlives its sandbox, which does not
// survive a host crash, so there is nothing to replay), no reserved
// blocks (the sandbox's root is the only user), no room kept for online
// resizing, no discard pass over a file that is all holes.
var mkfsArgs = []string{"-q", "-F", "-m", "0", "-E", "nodiscard", "-O", "^has_journal,^resize_inode"}

// findMkfs returns the path of mkfs.ext4 (in PATH, else sbin).
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: as root, a local sandbox's writable layer is a filesystem of its own (of its --disk bound, or with --disk 0 the size of the home's filesystem); install e2fsprogs", ErrNoMkfs)
}

// diskFS is a sandbox's bounded filesystem, mounted nowhere: its root is
// reached through a detached mount's descriptor, and the sandbox's jail and
// FUSE server each get a detached mount of their own (mount). No mount of it
// is ever in the caller's mount namespace, so no mount namespace made from
// that one (another sandbox's, a container's) can hold a copy that keeps
// it alive: it lives exactly as long as the sandbox's own namespaces and
// this launch's descriptor, and its loop device frees itself (autoclear)
// when the last goes, even if nothing ever runs runbox rm.
type diskFS struct {
	dev     string // the loop device
	root    int    // a detached mount of the filesystem, for the launch
	discard bool   // mounted with discard: what the sandbox frees goes back to the host
}

// Path returns a path to the root of the filesystem, valid in this process
// while d is open.
func (d *diskFS) Path() string { return fmt.Sprintf("/proc/self/fd/%d", d.root) }

// Close lets go of the launch's mount.
func (d *diskFS) Close() { unix.Close(d.root) }

// mount returns a fresh detached mount of the filesystem, nosuid: a second
// mount of the same device is the same filesystem (superblock).
//
// It is not nodev: the FUSE device node the jail opens lies in the layers
// (makeFuseDevice), and only host root can make a device node there (the
// sandbox's root is a user-namespaced one). nosuid and nodev would only
// concern what is opened or run through this mount itself, never what the
// sandbox runs through its root's own mount, which is nosuid and nodev
// (FUSE) or an overlay with flags of its own.
func (d *diskFS) mount() (int, error) {
	fsfd, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("mount the disk image: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", d.dev); err != nil {
		return -1, fmt.Errorf("mount the disk image: source %s: %w", d.dev, err)
	}
	// The kernel does not zero the inode tables in the background, which
	// would write to (and allocate) the image's holes.
	if err := unix.FsconfigSetFlag(fsfd, "noinit_itable"); err != nil {
		return -1, fmt.Errorf("mount the disk image: %w", err)
	}
	if d.discard {
		if err := unix.FsconfigSetFlag(fsfd, "discard"); err != nil {
			return -1, fmt.Errorf("mount the disk image: %w", err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("mount the disk image: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return -1, fmt.Errorf("mount the disk image: %w", err)
	}
	return mfd, nil
}

// newDisk makes the sandbox's disk image in sbDir, of size bytes, attaches
// it to a loop device and mounts it (detached); with discard, blocks the
// sandbox frees are given back to the home's filesystem (the loop device
// punches holes in the image), for an image as large as that filesystem.
func newDisk(sbDir string, size int64, discard bool) (*diskFS, error) {
	mkfs, err := findMkfs()
	if err != nil {
		return nil, err
	}
	image := filepath.Join(sbDir, diskImage)
	f, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("disk image: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return nil, fmt.Errorf("disk image: %w", err)
	}
	out, err := exec.Command(mkfs, append(mkfsArgs, image)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("disk image: %s: %w: %s", filepath.Base(mkfs), err, strings.TrimSpace(string(out)))
	}
	loop, dev, err := attachLoop(f, image)
	if err != nil {
		return nil, err
	}
	// Our descriptor goes once mounted (the filesystem holds the device),
	// or on failure, which frees the device.
	defer unix.Close(loop)
	d := &diskFS{dev: dev, discard: discard}
	if d.root, err = d.mount(); err != nil {
		return nil, err
	}
	// The sandbox has no use for fsck's directory.
	_ = os.Remove(filepath.Join(d.Path(), "lost+found"))
	return d, nil
}

// attachLoop attaches the image open in f to a free loop device, with
// autoclear, and returns the device, open, and its path.
func attachLoop(f *os.File, image string) (int, string, error) {
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("disk image: loop devices: %w", err)
	}
	defer unix.Close(ctl)
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], image)
	// Another process may take the device between GET_FREE and
	// CONFIGURE (EBUSY): ask again.
	for range 64 {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return -1, "", fmt.Errorf("disk image: a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", fmt.Errorf("disk image: %s: %w", dev, err)
		}
		err = unix.IoctlLoopConfigure(fd, &cfg)
		if err == nil {
			return fd, dev, nil
		}
		unix.Close(fd)
		if err != unix.EBUSY {
			return -1, "", fmt.Errorf("disk image: attach %s: %w", dev, err)
		}
	}
	return -1, "", errors.New("disk image: every free loop device was taken before it could be attached")
}

// releaseTimeout bounds how long releaseDisk waits for the loop device to
// free itself: the sandbox's FUSE server holds the filesystem until it has
// read its root's unmount.
const releaseTimeout = 10 * time.Second

// releaseDisk waits until the loop device of the sandbox's disk, if it
// has one, is free: it frees itself once the sandbox's namespaces are gone.
// It is safe to run more than once, and on a sandbox that never had a
// disk.
func releaseDisk(sbDir string) error {
	image := filepath.Join(sbDir, diskImage)
	if _, err := os.Lstat(image); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if real, err := filepath.EvalSymlinks(image); err == nil {
		image = real
	}
	deadline := time.Now().Add(releaseTimeout)
	for {
		devs := loopDevicesOf(func(backing string) bool { return backing == image })
		if len(devs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the disk image's loop device %s is still in use %v after the sandbox ended; run runbox rm again", strings.Join(devs, ", "), releaseTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopDevicesOf returns the loop devices whose backing file's path (as
// the kernel shows it) match accepts.
func loopDevicesOf(match func(backing string) bool) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if match(backing) {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return devs
}

// DefaultDisk returns the disk bound a local sandbox under the runbox
// home home gets when its spec names none: min(DefaultMaxDisk, half the
// space free to unprivileged users on the home's filesystem now).
func DefaultDisk(home string) (int64, error) {
	st, err := homeStatfs(home)
	if err != nil {
		return 0, fmt.Errorf("free space of %s: %w", home, err)
	}
	half := int64(st.Bavail) * st.Bsize / 2
	if half < DefaultMaxDisk {
		return half, nil
	}
	return DefaultMaxDisk, nil
}

// onOwnDisk says whether the sandbox whose state directory is sbDir has
// its layers on a disk image of their own (a disk bound, or a FUSE root),
// mounted nowhere in the host's mount namespace.
func onOwnDisk(sbDir string) bool {
	_, err := os.Lstat(filepath.Join(sbDir, diskImage))
	return err == nil
}

// homeStatfs returns the statfs of the filesystem home is (or will be) on:
// home's, or that of the nearest directory above it that exists.
func homeStatfs(home string) (unix.Statfs_t, error) {
	var st unix.Statfs_t
	for dir := home; ; dir = filepath.Dir(dir) {
		err := unix.Statfs(dir, &st)
		if err == nil || !errors.Is(err, unix.ENOENT) || dir == "/" {
			return st, err
		}
	}
}

// A FUSE root's layers are always on a filesystem of their own, bound or
// not (--disk 0). fuse-overlayfs (1.10, Debian's) knows a file by the
// inode number and device of the file it stands on, and keeps what it
// has seen of the host's root, by those numbers, for as long as it runs,
// without looking again. With the upper layer on the host root's
// filesystem, a file the sandbox made could get the number of a host file
// the server had seen and the host had since deleted: the server took the
// new file for the old one (a directory: mkdir answered ENOENT though the
// directory was made; tar's utime and chown of a file just written
// answered ENOENT, TestFuseRootHostInodeReuse). On a filesystem of its
// own, the upper layer's device is no host file's, so no file the sandbox
// makes can be taken for one.

// unboundedDisk returns the size of the disk image that holds a FUSE root's
// layers when the sandbox has no disk bound: the size of the home's
// filesystem, so that the image bounds nothing the host's filesystem does
// not. It is sparse and mounted with discard (see newDisk): it takes on the
// host what the sandbox has written and not deleted, as a directory would.
func unboundedDisk(home string) (int64, error) {
	st, err := homeStatfs(home)
	if err != nil {
		return 0, fmt.Errorf("size of the filesystem of %s: %w", home, err)
	}
	size := int64(st.Blocks) * st.Bsize
	if size < MinDisk {
		size = MinDisk
	}
	return size, nil
}
