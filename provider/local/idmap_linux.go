package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultUIDBase is the host uid (and gid) that root of a local sandbox
// is, when runbox runs as root: sandbox ids 0..MappedIDs-1 are host ids
// DefaultUIDBase.. onwards. It lies above the range systemd leaves to
// containers (524288..1879048191) and the subordinate ranges useradd hands
// out (from 100000 upwards), below 2^31 (which some tools mishandle). Pick
// another with RUNBOX_LOCAL_UID_BASE or Provider.UIDBase: any base whose
// MappedIDs ids no host user or other container engine uses.
const DefaultUIDBase = 2_000_000_000

// MappedIDs is how many uids and gids a local sandbox has (what a Linux
// distribution's packages need: system users, nobody at 65534).
const MappedIDs = 65536

// UIDBaseEnv names the environment variable that overrides DefaultUIDBase.
const UIDBaseEnv = "RUNBOX_LOCAL_UID_BASE"

// idMap is how a sandbox's ids map to the host's.
type idMap struct {
	// userns says the sandbox gets a user namespace.
	userns bool
	// hostRoot is the host uid and gid of the sandbox's root.
	hostUID, hostGID int
	// size is how many ids are mapped (1 rootless: only the caller's).
	size int
	// swapped, when not 0, is the overflow id, which the sandbox's root
	// files are kept as on disk in a FUSE-served root (and the other way
	// round): see fuseIDMapping.
	swapped int
}

// onDisk returns the sandbox id that a file presented as owned by id is
// kept as in the upper layer.
func (m idMap) onDisk(id int) int {
	switch {
	case m.swapped == 0:
		return id
	case id == 0:
		return m.swapped
	case id == m.swapped:
		return 0
	}
	return id
}

// mapped reports whether the map is a range of unprivileged host ids (as
// root, by default): trees are then id-mapped to the sandbox's namespace.
func (m idMap) mapped() bool { return m.userns && m.size > 1 }

// chooseIDMap decides a sandbox's mapping: rootless, the caller's own ids
// (the only ones it may map); as root, MappedIDs ids from the base, or no
// user namespace at all with hostRoot.
func chooseIDMap(base uint32, hostRoot bool) (idMap, error) {
	if os.Geteuid() != 0 {
		if hostRoot {
			return idMap{}, fmt.Errorf("--host-root needs root: %w", errors.ErrUnsupported)
		}
		return idMap{userns: true, hostUID: os.Geteuid(), hostGID: os.Getegid(), size: 1}, nil
	}
	if hostRoot {
		return idMap{}, nil
	}
	if base == 0 {
		base = DefaultUIDBase
		if v := os.Getenv(UIDBaseEnv); v != "" {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n == 0 || n+MappedIDs > 1<<32-1 {
				return idMap{}, fmt.Errorf("%s=%q: want a host uid from 1 to %d", UIDBaseEnv, v, uint64(1<<32-1-MappedIDs))
			}
			base = uint32(n)
		}
	}
	return idMap{userns: true, hostUID: int(base), hostGID: int(base), size: MappedIDs}, nil
}

// sysProcIDMaps returns the maps for a clone with CLONE_NEWUSER.
func (m idMap) sysProcIDMaps() (uids, gids []syscall.SysProcIDMap) {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: m.hostUID, Size: m.size}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: m.hostGID, Size: m.size}}
}

// chown gives path to the sandbox's root (as the host sees it), where
// that is not the caller already: in a mapped range.
func (m idMap) chown(path string) error {
	if !m.mapped() {
		return nil
	}
	return os.Lchown(path, m.hostUID, m.hostGID)
}

// idmappedTree returns a detached clone of the mount at dir (not the
// mounts under it), id-mapped to the user namespace of process pid,
// without setuid or devices, for the sandbox to attach (move_mount). Only
// host root may make one: the kernel wants CAP_SYS_ADMIN over the
// filesystem's own user namespace.
func idmappedTree(dir string, pid int) (int, error) {
	return idmappedTreeAt(unix.AT_FDCWD, dir, 0, pid)
}

// idmappedTreeOf is idmappedTree of the directory handle f holds (the
// workspace as Create opened and checked it), never of a path that could
// be swapped since.
func idmappedTreeOf(f *os.File, pid int) (int, error) {
	return idmappedTreeAt(int(f.Fd()), "", unix.AT_EMPTY_PATH, pid)
}

// idmappedTreeAt is idmappedTree of path relative to dirfd (open_tree's
// arguments).
func idmappedTreeAt(dirfd int, path string, flags uint, pid int) (int, error) {
	dir := path
	if dir == "" {
		dir = fmt.Sprintf("the directory at descriptor %d", dirfd)
	}
	userns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("user namespace of runboxd: %w", err)
	}
	defer unix.Close(userns)
	fd, err := unix.OpenTree(dirfd, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|flags)
	if err != nil {
		return -1, fmt.Errorf("clone the mount of %s: %w", dir, err)
	}
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("id-map the mount of %s (its filesystem must support id-mapped mounts: ext4, xfs, btrfs, tmpfs on Linux 6.3+; or use --host-root): %w", dir, err)
	}
	return fd, nil
}

// hostSecrets are the host files whose contents a sandbox on the host's
// root gets sanitised copies of (password hashes replaced by "*"), in its
// upper layer: the files stay, so users and groups resolve and useradd
// works, but no hash is there to crack.
var hostSecrets = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-"}

// sanitizeSecrets writes, under upper, a copy of each of hostSecrets (of
// the host root at root) with the second field of every line (the
// password hash) replaced by "*", owned as the host's, through the map.
func sanitizeSecrets(root, upper string, m idMap) error {
	for _, p := range hostSecrets {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue // absent, or unreadable to this user: nothing to hide
		}
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			continue
		}
		var out bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), ":", 3)
			if len(f) == 3 && f[1] != "" {
				f[1] = "*"
			}
			out.WriteString(strings.Join(f, ":"))
			out.WriteByte('\n')
		}
		if err := mkdirsLike(upper, root, filepath.Dir(p), m); err != nil {
			return err
		}
		dst := filepath.Join(upper, p)
		if err := os.WriteFile(dst, out.Bytes(), fi.Mode().Perm()); err != nil {
			return fmt.Errorf("sanitised %s: %w", p, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if err := lchownMapped(dst, int(st.Uid), int(st.Gid), m); err != nil {
			return fmt.Errorf("sanitised %s: %w", p, err)
		}
	}
	return nil
}

// mkdirLike makes dir with the mode and (mapped) owner of the host's like.
func mkdirLike(dir, like string, m idMap) error {
	fi, err := os.Stat(like)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, fi.Mode().Perm()); err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return lchownMapped(dir, int(st.Uid), int(st.Gid), m)
}

// mkdirsLike makes the directory dir (a path in the host's root at root)
// under upper, and each one above it there, like the host's: the upper
// layer's directories hide the host's modes and owners, and the sandbox
// must keep them (a directory left to the host's root would also be
// closed to the server of a FUSE root).
func mkdirsLike(upper, root, dir string, m idMap) error {
	at, host := upper, root
	for _, part := range strings.Split(filepath.Clean("/"+dir), "/") {
		if part == "" {
			continue
		}
		at, host = filepath.Join(at, part), filepath.Join(host, part)
		if _, err := os.Lstat(at); err == nil {
			continue
		}
		if err := mkdirLike(at, host, m); err != nil {
			return err
		}
	}
	return nil
}

// lchownMapped sets path's owner to what host ids uid, gid are in the
// sandbox, as the host stores them.
func lchownMapped(path string, uid, gid int, m idMap) error {
	if !m.mapped() {
		return nil
	}
	if uid >= m.size || gid >= m.size {
		uid, gid = 65534, 65534 // the sandbox's nobody
	}
	return os.Lchown(path, m.hostUID+m.onDisk(uid), m.hostGID+m.onDisk(gid))
}
