package owndir

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

// TestCheck: on real directories of this test's, Check accepts one only
// its owner may write into and refuses, naming it and why, one that is
// sticky, world-writable, or grants another uid write by a POSIX ACL (set
// as setfacl does); Open refuses a link in the path.
func TestCheck(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	check := func(d string) error {
		f, err := Open(d)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return Check(f, d)
	}
	for _, d := range []string{mk("private", 0o700), mk("plain", 0o755)} {
		if err := check(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	acl := mk("acl", 0o755)
	if err := unix.Setxattr(acl, "system.posix_acl_access", aclBytes([][3]uint32{{0x01, 7, ^uint32(0)}, {0x02, 7, 4242}, {0x04, 5, ^uint32(0)}, {0x10, 7, ^uint32(0)}, {0x20, 5, ^uint32(0)}}), 0); err != nil {
		t.Fatalf("setfacl: %v", err)
	}
	for d, why := range map[string]string{
		mk("sticky", 0o777|os.ModeSticky): "sticky",
		mk("world", 0o777):                "any user may write",
		acl:                               "uid 4242 may write into it through its POSIX ACL",
	} {
		err := check(d)
		if !errors.Is(err, runbox.ErrUnsafeWorkdir) || !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want ErrUnsafeWorkdir naming it and %q", d, err, why)
		}
	}
	if err := os.Symlink(base, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if f, err := Open(filepath.Join(base, "link", "plain")); !errors.Is(err, runbox.ErrInvalidSpec) {
		if f != nil {
			f.Close()
		}
		t.Errorf("a link in the path: %v", err)
	}
}

// TestRefusal: the rule on stats and ACLs made up for it, where a real
// directory would need other users: another owner; a group-writable
// directory of another group (with and without an ACL, whose own group
// entry then decides); an ACL whose mask takes write away; an ACL entry
// for the caller itself; a directory of the user who ran sudo, when the
// caller is root through sudo.
func TestRefusal(t *testing.T) {
	const me, myGroup = 1234, 5678
	all := ^uint32(0)
	named := func(tag, perm, id uint32, mask uint32) *posixACL {
		a, err := parseACL(aclBytes([][3]uint32{{0x01, 7, all}, {tag, perm, id}, {0x04, 5, all}, {0x10, mask, all}, {0x20, 5, all}}))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		name    string
		uid     uint32
		gid     uint32
		mode    uint32
		acl     *posixACL
		refused bool
	}{
		{"mine", me, myGroup, 0o755, nil, false},
		{"another owner", me + 1, myGroup, 0o700, nil, true},
		{"another group may write", me, myGroup + 1, 0o775, nil, true},
		{"ACL: group entry r-x, mask rwx (mode shows 0775)", me, myGroup + 1, 0o775, named(0x02, 7, me, 7), false},
		{"ACL: another user rwx", me, myGroup, 0o775, named(0x02, 7, me+1, 7), true},
		{"ACL: another user rwx, mask r-x", me, myGroup, 0o755, named(0x02, 7, me+1, 5), false},
		{"ACL: a group rwx", me, myGroup, 0o775, named(0x08, 7, myGroup, 7), true},
		{"root through sudo: the sudo user's", me + 2, myGroup, 0o755, nil, false},
		{"root through sudo: root's", 0, 0, 0o755, nil, false},
		{"root through sudo: another's", me + 3, myGroup, 0o755, nil, true},
	} {
		callers := []uint32{me}
		if strings.HasPrefix(c.name, "root through sudo") {
			callers = []uint32{0, me + 2}
		}
		st := unix.Stat_t{Uid: c.uid, Gid: c.gid, Mode: unix.S_IFDIR | c.mode}
		if why := refusal(st, c.acl, callers); (why != "") != c.refused {
			t.Errorf("%s: refusal %q, want refused %v", c.name, why, c.refused)
		}
	}
}

// aclBytes encodes ACL entries (tag, perm, id) as the kernel's xattr.
func aclBytes(entries [][3]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

// BenchmarkOpen is the baseline: resolving a workdir, as every create did
// before the rule.
func BenchmarkOpen(b *testing.B) {
	d := b.TempDir()
	for b.Loop() {
		f, err := Open(d)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkOpenCheck is what a create does now: resolve, then Check
// (fstat, the ACL through /proc/self/fd).
func BenchmarkOpenCheck(b *testing.B) {
	d := b.TempDir()
	for b.Loop() {
		f, err := Open(d)
		if err != nil {
			b.Fatal(err)
		}
		if err := Check(f, d); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
