package sandboxnames

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/strangertest"
)

// strangerUID is the unprivileged host user who plants.
const strangerUID = strangertest.UID

// vault returns a fresh root-only directory (0700) at a random path.
func vault(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), strangertest.RandomHex(9))
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestIndexPlantsRefused: another local user who can write where the
// index goes (a home in a shared directory) makes its directory first, or
// finds it loosened, and plants, at random paths: the temporary file of a
// name's entry as a link to a root-only file, and the index's lock as a
// dangling link into a root-only directory. A create's Claim and Set must
// neither write through the first nor create the second; in a directory
// not this user's, or past a lock that is not this user's regular file,
// they refuse (ErrNotOwn). Before: the root-only file was
// overwritten with the entry's JSON, and the lock's target was created.
func TestIndexPlantsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to plant as another user")
	}
	for _, theirs := range []bool{true, false} {
		name := map[bool]string{true: "their directory", false: "our loosened directory"}[theirs]
		t.Run(name, func(t *testing.T) {
			for range 3 {
				home := strangertest.SharedHome(t)
				x := At(home)
				if err := os.Mkdir(x.dir, 0o777); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(x.dir, 0o777); err != nil {
					t.Fatal(err)
				}
				secret := filepath.Join(vault(t), strangertest.RandomHex(11))
				if err := os.WriteFile(secret, []byte("root only\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				created := filepath.Join(vault(t), strangertest.RandomHex(11))
				sbName := "n" + strangertest.RandomHex(8)
				plants := map[string]string{
					filepath.Join(x.dir, "."+sbName+".tmp"): secret,
					filepath.Join(x.dir, ".lock"):           created,
				}
				for p, target := range plants {
					if err := os.Symlink(target, p); err != nil {
						t.Fatal(err)
					}
					if err := os.Lchown(p, strangerUID, strangerUID); err != nil {
						t.Fatal(err)
					}
				}
				if theirs {
					if err := os.Chown(x.dir, strangerUID, strangerUID); err != nil {
						t.Fatal(err)
					}
				}
				release, err := x.Claim(sbName, errInUse, never)
				if err == nil {
					release()
					err = x.Set(sbName, Entry{Provider: "host", ID: "0123456789ab"})
				}
				switch {
				case theirs && !errors.Is(err, ErrNotOwn):
					t.Errorf("claim in the stranger's directory: %v; want ErrNotOwn", err)
				case !theirs && err != nil && !errors.Is(err, ErrNotOwn):
					// A planted lock is refused, never followed.
					t.Errorf("claim in our own loosened directory: %v; want success or ErrNotOwn", err)
				}
				if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
					t.Errorf("the root-only file behind the planted link now holds %q", b)
				}
				if _, err := os.Lstat(created); err == nil {
					t.Errorf("the index created %s through the planted lock link", created)
				}
				if !theirs && err == nil {
					if e, err := x.Lookup(sbName); err != nil || e.ID != "0123456789ab" {
						t.Errorf("Lookup after Set: %+v, %v", e, err)
					}
					if fi, err := os.Stat(x.dir); err != nil || fi.Mode().Perm() != 0o700 {
						t.Errorf("index directory after a write: %v, %v; want 0700", fi.Mode(), err)
					}
				}
			}
		})
	}
}

// TestLookupOfAPlantedEntryReturns: an entry that is a FIFO, a link, a
// directory or a file far larger than any entry (each at a random name)
// is an error at once: the front's lookup never waits on a FIFO's writer
// nor reads a huge file whole. Before: Lookup of the FIFO blocked for
// good, and runbox exec NAME with it.
func TestLookupOfAPlantedEntryReturns(t *testing.T) {
	x := At(t.TempDir())
	if err := os.Mkdir(x.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "entry")
	if err := os.WriteFile(target, []byte(`{"provider":"host","id":"0123456789ab"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := map[string]func(p string) error{
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"link":      func(p string) error { return os.Symlink(target, p) },
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
		"huge": func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(1 << 30)
		},
	}
	for kind, put := range plant {
		name := "p" + strangertest.RandomHex(10)
		if err := put(filepath.Join(x.dir, name)); err != nil {
			t.Fatal(err)
		}
		done := async(func() error { _, err := x.Lookup(name); return err })
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s entry: Lookup succeeded; want an error", kind)
			}
		case <-time.After(time.Minute): // a hang, not a slow answer
			t.Fatalf("%s entry: Lookup still waits after a minute", kind)
		}
	}
}

// async runs f in a goroutine and returns its result's channel.
func async(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- f() }()
	return c
}

// TestRootInAUsersHome: root working in a user's own home (0700, the
// user's, its index the user's) reads and writes the index as before: the
// owner of a home no one else may write in is trusted.
func TestRootInAUsersHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	home := filepath.Join(t.TempDir(), strangertest.RandomHex(10))
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	x := At(home)
	if err := os.Mkdir(x.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	entry := filepath.Join(x.dir, "a")
	if err := os.WriteFile(entry, []byte(`{"provider":"host","id":"0123456789ab"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, x.dir, entry} {
		if err := os.Chown(p, strangertest.UID, strangertest.UID); err != nil {
			t.Fatal(err)
		}
	}
	if e, err := x.Lookup("a"); err != nil || e.ID != "0123456789ab" {
		t.Errorf("Lookup in a user's home: %+v, %v", e, err)
	}
	release, err := x.Claim("b", errInUse, never)
	if err != nil {
		t.Fatalf("Claim in a user's home: %v", err)
	}
	release()
}
