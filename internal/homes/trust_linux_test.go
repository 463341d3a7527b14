package homes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/internal/strangertest"
)

// checkAsStranger, set to a path, makes the test binary the stranger:
// it prints what Trusted says of that path ("ok" or the error).
const checkAsStranger = "RUNBOX_TEST_HOMES_CHECK"

func TestMain(m *testing.M) {
	if p := os.Getenv(checkAsStranger); p != "" {
		if err := Trusted(p); err != nil {
			fmt.Println(err)
		} else {
			fmt.Println("ok")
		}
		os.Exit(0)
	}
	strangertest.Main(m)
}

// randomDepth makes 0 to 2 fresh directories (mode 0755, root's) under
// base at random names and returns the deepest: each case's target lies at
// a random place.
func randomDepth(t *testing.T, base string) string {
	t.Helper()
	d := base
	for range int(strangertest.RandomHex(1)[0]) % 3 {
		d = filepath.Join(d, strangertest.RandomHex(6))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// must fails the test on the first error.
func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// aclGivingWrite is a POSIX access ACL (the kernel's xattr form) that
// lets uid write, its mask included, as `setfacl -m u:UID:rwx` makes.
func aclGivingWrite(uid uint32) []byte {
	const any = ^uint32(0)
	entries := [][3]uint32{{0x01, 7, any}, {0x02, 7, uid}, {0x04, 5, any}, {0x10, 7, any}, {0x20, 5, any}}
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

// TestOpenRefusesHomesOthersMayChange: a home, or a directory or link on
// its path, that another user (the stranger) may change is refused with
// ErrUnsafeHome naming it, at a random place each time; the homes that
// only the caller and root may change are opened. Before the rule, runbox
// used each refused one, and the stranger's planted records in it.
func TestOpenRefusesHomesOthersMayChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give directories to another user")
	}
	const s = strangertest.UID
	// Each case returns the home to open and the path the refusal must
	// name ("" when the home must be opened).
	cases := map[string]func(t *testing.T, base string) (home, culprit string){
		"home world-writable": func(t *testing.T, base string) (string, string) {
			h := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700), os.Chmod(h, 0o777))
			return h, h
		},
		"home sticky": func(t *testing.T, base string) (string, string) {
			h := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700), os.Chmod(h, 0o777|os.ModeSticky))
			return h, h
		},
		"home writable by another group": func(t *testing.T, base string) (string, string) {
			h := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700), os.Chown(h, 0, s), os.Chmod(h, 0o770))
			return h, h
		},
		"home writable through an ACL": func(t *testing.T, base string) (string, string) {
			h := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700), unix.Setxattr(h, "system.posix_acl_access", aclGivingWrite(s), 0))
			return h, h
		},
		"a directory above, world-writable": func(t *testing.T, base string) (string, string) {
			d := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(d, 0o700), os.Chmod(d, 0o777))
			h := filepath.Join(randomDepth(t, d), strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700))
			return h, d
		},
		"a directory above, the stranger's": func(t *testing.T, base string) (string, string) {
			d := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(d, 0o755), os.Chown(d, s, s))
			h := filepath.Join(d, strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700))
			return h, d
		},
		"a link on the path, the stranger's": func(t *testing.T, base string) (string, string) {
			real := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			link := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(real, 0o700), os.Symlink(real, link), os.Lchown(link, s, s))
			return filepath.Join(link, "home"), link
		},
		"the stranger made it first in a sticky directory": func(t *testing.T, base string) (string, string) {
			d := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(d, 0o700), os.Chmod(d, 0o777|os.ModeSticky))
			h := filepath.Join(d, strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o700), os.Chown(h, s, s))
			return h, d
		},
		"ok: missing, made 0700": func(t *testing.T, base string) (string, string) {
			return filepath.Join(randomDepth(t, base), strangertest.RandomHex(8), "runbox"), ""
		},
		"ok: in a sticky directory, root's": func(t *testing.T, base string) (string, string) {
			d := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(d, 0o700), os.Chmod(d, 0o777|os.ModeSticky))
			return filepath.Join(d, strangertest.RandomHex(8)), ""
		},
		"ok: root in a user's home": func(t *testing.T, base string) (string, string) {
			d := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			h := filepath.Join(d, ".runbox")
			must(t, os.Mkdir(d, 0o755), os.Mkdir(h, 0o700), os.Chown(d, s, s), os.Chown(h, s, s))
			return h, ""
		},
		"ok: through a link of root's": func(t *testing.T, base string) (string, string) {
			real := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			link := filepath.Join(randomDepth(t, base), strangertest.RandomHex(8))
			must(t, os.Mkdir(real, 0o700), os.Symlink(real, link))
			return link, ""
		},
	}
	for name, make := range cases {
		t.Run(name, func(t *testing.T) {
			home, culprit := make(t, strangertest.TraversableDir(t))
			abs, err := Open(home)
			if culprit == "" {
				if err != nil {
					t.Fatalf("Open(%s): %v", home, err)
				}
				var st unix.Stat_t
				must(t, unix.Stat(abs, &st))
				if st.Mode&0o077 != 0 && st.Uid == 0 {
					t.Errorf("home %s made with mode %o", abs, st.Mode&0o777)
				}
				return
			}
			if !errors.Is(err, ErrUnsafeHome) {
				t.Fatalf("Open(%s) = %q, %v; want ErrUnsafeHome", home, abs, err)
			}
			if !strings.Contains(err.Error(), culprit) {
				t.Errorf("the refusal does not name %s: %v", culprit, err)
			}
		})
	}
}

// TestStrangerRefusesHomesItDoesNotOwn: the same rule for a caller that is
// not root (the stranger): a home of root's it may not write, or its own,
// passes; a home of another user's (root's, given to a third uid) does
// not, though only that owner may write it.
func TestStrangerRefusesHomesItDoesNotOwn(t *testing.T) {
	cases := []struct {
		name  string
		owner int
		ok    bool
	}{
		{"its own", strangertest.UID, true},
		{"root's", 0, true},
		{"a third user's", strangertest.UID - 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd, _ := strangertest.Command(t)
			h := filepath.Join(randomDepth(t, strangertest.TraversableDir(t)), strangertest.RandomHex(8))
			must(t, os.Mkdir(h, 0o755), os.Chown(h, c.owner, c.owner))
			cmd.Env = append(cmd.Env, checkAsStranger+"="+h)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("the stranger's check: %v", err)
			}
			got := strings.TrimSpace(string(out))
			if c.ok && got != "ok" || !c.ok && !strings.HasSuffix(got, ErrUnsafeHome.Error()) {
				t.Errorf("home of uid %d, the stranger checking: %s", c.owner, got)
			}
		})
	}
}

// TestLinkLoopRefused: a home whose path loops through links is refused,
// not walked for good.
func TestLinkLoopRefused(t *testing.T) {
	d := t.TempDir()
	a, b := filepath.Join(d, "a"), filepath.Join(d, "b")
	must(t, os.Symlink(b, a), os.Symlink(a, b))
	if _, err := Open(filepath.Join(a, "home")); !errors.Is(err, unix.ELOOP) {
		t.Errorf("Open through a loop: %v, want ELOOP", err)
	}
}

// BenchmarkTrusted is the rule's cost, against one stat of the home as
// the baseline: "walk" is a process's first check of a home (the front's,
// once per exec), "trusted" every later one (runbox-full's providers each
// open the home).
func BenchmarkTrusted(b *testing.B) {
	home := filepath.Join(b.TempDir(), "a", "runbox")
	if _, err := Open(home); err != nil {
		b.Fatal(err)
	}
	b.Run("stat", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.Stat(home); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			trustedHomes.Delete(home)
			if err := Trusted(home); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("trusted", func(b *testing.B) {
		for b.Loop() {
			if err := Trusted(home); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestOpenConcurrently: providers open the home from many goroutines;
// the answer each gets is the rule's, a home removed and made again by
// another user in a sticky directory is refused though it passed before,
// and the memo of passed homes holds under -race.
func TestOpenConcurrently(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a directory to another user")
	}
	sticky := filepath.Join(strangertest.TraversableDir(t), strangertest.RandomHex(8))
	must(t, os.Mkdir(sticky, 0o700), os.Chmod(sticky, 0o777|os.ModeSticky))
	home := filepath.Join(sticky, strangertest.RandomHex(8))
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			_, err := Open(home)
			if err == nil {
				err = Trusted(home)
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatalf("Open of a fresh home from 16 goroutines: %v", err)
		}
	}
	// Removed, then made first by the stranger where ours was.
	must(t, os.Remove(home), os.Mkdir(home, 0o700), os.Chown(home, strangertest.UID, strangertest.UID))
	if _, err := Open(home); !errors.Is(err, ErrUnsafeHome) {
		t.Errorf("Open of a home the stranger made again: %v, want ErrUnsafeHome", err)
	}
}
