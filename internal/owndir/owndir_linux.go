package owndir

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// Open opens the absolute directory abs as an O_PATH handle, resolved
// component by component with no symbolic link followed (openat2
// RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS), so the handle is the
// directory the caller named and not where a link (one a sandbox planted,
// say) points. A link anywhere in the path, a missing directory (runbox
// does not create one on the host) and a non-directory are refused with
// runbox.ErrInvalidSpec.
func Open(abs string) (*os.File, error) {
	if !filepath.IsAbs(abs) {
		return nil, fmt.Errorf("workdir %q is not an absolute path: %w", abs, runbox.ErrInvalidSpec)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("workdir %s has a symbolic link in its path: runbox resolves a workdir without following links (rule 2 of docs/security.md); give the real path: %w", abs, runbox.ErrInvalidSpec)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("workdir %s does not exist: runbox does not create it on the host; make it first: %w", abs, runbox.ErrInvalidSpec)
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("workdir %s is not a directory: %w", abs, runbox.ErrInvalidSpec)
	case err != nil:
		return nil, fmt.Errorf("workdir %s: %w", abs, err)
	}
	return os.NewFile(uintptr(fd), abs), nil
}

// Check refuses, with an error wrapping runbox.ErrUnsafeWorkdir and
// runbox.ErrInvalidSpec that names abs and says what to do, the directory
// f (a handle from Open, named abs) unless only the caller may add entries
// to it: it must belong to the caller's effective uid and give write to no
// one else, by its mode (no sticky bit, not world-writable, not
// group-writable unless the group is the caller's user private group) or
// by a POSIX ACL. The check reads the inode f holds, never the path.
func Check(f *os.File, abs string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("workdir %s: %w", abs, err)
	}
	acl, err := readACL(f)
	if err != nil {
		return fmt.Errorf("workdir %s: its ACL: %w", abs, err)
	}
	why := refusal(st, acl, Callers())
	if why == "" {
		return nil
	}
	return fmt.Errorf("workdir %s is not yours alone (%s): whatever others put there, a service's unix socket above all, would be in the sandbox; use a directory of your own, e.g. `mktemp -d` or `mkdir -m 0755 DIR` (docs/security.md, rule 6): %w: %w",
		abs, why, runbox.ErrUnsafeWorkdir, runbox.ErrInvalidSpec)
}

// Stat returns the device and inode of the directory f holds, for a later
// open by path to be compared with (see Same).
func Stat(f *os.File) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, 0, fmt.Errorf("workdir %s: %w", f.Name(), err)
	}
	return st.Dev, st.Ino, nil
}

// Callers are the uids a workdir may belong to: this process's effective
// uid and, when that is root run through sudo, the user who ran sudo
// (SUDO_UID: `sudo runbox run` in one's own project directory; only root
// or that user can have set it for a root process).
func Callers() []uint32 {
	ids := []uint32{uint32(os.Geteuid())}
	if ids[0] == 0 {
		if n, err := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32); err == nil && n != 0 {
			ids = append(ids, uint32(n))
		}
	}
	return ids
}

// Refusal says why no one but owners may add entries to, remove or
// rename them in the directory f holds (a handle of it), or returns ""
// when that holds: it must belong to one of owners and give write to no
// one else, by its mode or a POSIX ACL. With stickyOK a sticky directory
// (/tmp) passes whoever may write in it, as others can then add entries
// but not remove or rename one of owners'. It reads the inode f holds.
func Refusal(f *os.File, owners []uint32, stickyOK bool) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	if stickyOK && st.Mode&unix.S_ISVTX != 0 && slices.Contains(owners, st.Uid) {
		return "", nil
	}
	acl, err := readACL(f)
	if err != nil {
		return "", fmt.Errorf("its ACL: %w", err)
	}
	return refusal(st, acl, owners), nil
}

// refusal says why a directory with stat st and ACL acl (nil: none) is
// not alone the caller's (one of the uids callers), or "" when it is.
func refusal(st unix.Stat_t, acl *posixACL, callers []uint32) string {
	mode := st.Mode & 0o7777
	groupWrite := mode&0o020 != 0
	if acl != nil {
		// With an ACL the mode's group bits are the mask; the owning
		// group's own entry says what it may do.
		groupWrite = acl.groupObj&aclWrite != 0 && acl.maskWrite()
	}
	switch {
	case !slices.Contains(callers, st.Uid):
		return fmt.Sprintf("it belongs to %s, not to you (uid %d): its owner may put anything in it, or open it to others, at any time", userName(st.Uid), callers[0])
	case mode&unix.S_ISVTX != 0:
		return fmt.Sprintf("mode %04o: sticky, like /tmp, so any user who may write into it can leave files and sockets there", mode)
	case mode&0o002 != 0:
		return fmt.Sprintf("mode %04o: any user may write into it", mode)
	case groupWrite && !privateGroup(st.Gid, st.Uid):
		return fmt.Sprintf("mode %04o: group %s may write into it; `chmod g-w` it if that group is yours alone", mode, groupName(st.Gid))
	case acl != nil:
		if who := acl.otherWriter(callers); who != "" {
			return who + " may write into it through its POSIX ACL (getfacl shows it; `setfacl -b` removes it)"
		}
	}
	return ""
}

// privateGroup reports whether gid is the user private group of uid (the
// directory's owner, one of the callers): its primary group, named as the
// user is, the convention useradd follows on systems whose umask makes
// directories group-writable (0775).
func privateGroup(gid, uid uint32) bool {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil || u.Gid != strconv.FormatUint(uint64(gid), 10) {
		return false
	}
	g, err := user.LookupGroupId(u.Gid)
	return err == nil && g.Name == u.Username
}

// userName is "uid N (name)", or "uid N" for an unknown uid.
func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// groupName is "gid N (name)", or "gid N" for an unknown gid.
func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return fmt.Sprintf("gid %d (%s)", gid, g.Name)
	}
	return fmt.Sprintf("gid %d", gid)
}

// POSIX ACL entries as the kernel stores them in system.posix_acl_access
// (include/uapi/linux/posix_acl_xattr.h).
const (
	aclVersion  = 2
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclWrite    = 0x02
)

// posixACL is what Check needs of a directory's access ACL.
type posixACL struct {
	groupObj uint16
	mask     int // -1: no mask entry
	named    []aclEntry
}

// aclEntry is a named user's or group's entry.
type aclEntry struct {
	tag  uint16
	perm uint16
	id   uint32
}

// maskWrite reports whether the mask (if any) lets group-class entries write.
func (a *posixACL) maskWrite() bool { return a.mask < 0 || a.mask&aclWrite != 0 }

// otherWriter names the first user not among callers, or group, that a
// named entry lets write, or returns "".
func (a *posixACL) otherWriter(callers []uint32) string {
	if !a.maskWrite() {
		return ""
	}
	for _, e := range a.named {
		switch {
		case e.perm&aclWrite == 0:
		case e.tag == aclUser && !slices.Contains(callers, e.id):
			return userName(e.id)
		case e.tag == aclGroup:
			return "group " + groupName(e.id)
		}
	}
	return ""
}

// readACL reads the access ACL of the directory f holds, through
// /proc/self/fd (an O_PATH handle takes no fgetxattr): nil when it has
// none or its filesystem keeps none.
func readACL(f *os.File) (*posixACL, error) {
	path := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, "system.posix_acl_access", buf)
	switch {
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return parseACL(buf[:n])
}

// parseACL decodes an access ACL in the kernel's xattr format.
func parseACL(b []byte) (*posixACL, error) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != aclVersion || (len(b)-4)%8 != 0 {
		return nil, fmt.Errorf("malformed POSIX ACL (%d bytes)", len(b))
	}
	a := &posixACL{mask: -1}
	for b = b[4:]; len(b) > 0; b = b[8:] {
		e := aclEntry{tag: binary.LittleEndian.Uint16(b), perm: binary.LittleEndian.Uint16(b[2:]), id: binary.LittleEndian.Uint32(b[4:])}
		switch e.tag {
		case aclGroupObj:
			a.groupObj = e.perm
		case aclMask:
			a.mask = int(e.perm)
		case aclUser, aclGroup:
			a.named = append(a.named, e)
		}
	}
	return a, nil
}
