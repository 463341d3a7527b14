package safepath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRefusesLinksAndDotDot: both the openat2 path and the O_NOFOLLOW walk
// (the ENOSYS fallback) refuse a link at any depth and "..", and open a
// plain directory.
func TestRefusesLinksAndDotDot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a/b/c"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(root, "a/b/up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("c", filepath.Join(root, "a/b/rel")); err != nil {
		t.Fatal(err)
	}
	open := map[string]func(string) (*os.File, error){
		"openat2": func(rel string) (*os.File, error) { return OpenBeneath(root, rel) },
		"walk": func(rel string) (*os.File, error) {
			r, err := OpenDirNoFollow(root)
			if err != nil {
				return nil, err
			}
			defer r.Close()
			return walk(r, root, rel)
		},
	}
	for name, fn := range open {
		for _, bad := range []string{"a/b/up", "a/b/up/etc", "a/b/rel", "a/../a", "../x", "a/b/c/../../.."} {
			if f, err := fn(bad); !errors.Is(err, ErrUnsafe) {
				if f != nil {
					f.Close()
				}
				t.Errorf("%s %q: want ErrUnsafe, got %v", name, bad, err)
			}
		}
		f, err := fn("a/b/c")
		if err != nil {
			t.Fatalf("%s a/b/c: %v", name, err)
		}
		f.Close()
	}
	if _, err := OpenDirNoFollow(filepath.Join(root, "a/b/up")); !errors.Is(err, ErrUnsafe) {
		t.Errorf("OpenDirNoFollow through a link: %v", err)
	}
	if _, err := MkdirBeneath(root, "a/b/up/tmp/x", 0o700); !errors.Is(err, ErrUnsafe) {
		t.Errorf("MkdirBeneath through a link: %v", err)
	}
	f, err := MkdirBeneath(root, "n/e/w", 0o700)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if st, err := os.Stat(filepath.Join(root, "n/e/w")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("MkdirBeneath: %v %v", st, err)
	}
}
