package files

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
)

func tarOf(t *testing.T, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	return &b
}

func openRoot(t *testing.T, dir string) *FS {
	t.Helper()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestExtractRefuses: every way out of the root is refused with the right
// sentinel, and nothing appears outside it.
func TestExtractRefuses(t *testing.T) {
	reg := func(n string) *tar.Header { return &tar.Header{Name: n, Typeflag: tar.TypeReg} }
	sym := func(n, target string) *tar.Header {
		return &tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: target}
	}
	for _, tc := range []struct {
		name string
		hdrs []*tar.Header
		want error
	}{
		{"dotdot", []*tar.Header{reg("../x")}, runbox.ErrEscapesRoot},
		{"inner-dotdot", []*tar.Header{reg("a/../../x")}, runbox.ErrEscapesRoot},
		{"absolute", []*tar.Header{reg("/x")}, runbox.ErrEscapesRoot},
		{"symlink-abs", []*tar.Header{sym("l", "/"), reg("l/x")}, runbox.ErrEscapesRoot},
		{"symlink-rel", []*tar.Header{sym("l", ".."), reg("l/x")}, runbox.ErrEscapesRoot},
		{"symlink-dir-entry", []*tar.Header{sym("l", ".."), {Name: "l/d/", Typeflag: tar.TypeDir, Mode: 0o755}}, runbox.ErrEscapesRoot},
		{"hardlink-out", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside"}}, runbox.ErrEscapesRoot},
		{"long", []*tar.Header{reg(strings.Repeat("n", 256))}, runbox.ErrInvalidPath},
		{"fifo", []*tar.Header{{Name: "p", Typeflag: tar.TypeFifo}}, runbox.ErrInvalidPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			os.Mkdir(root, 0o755)
			os.WriteFile(filepath.Join(base, "outside"), []byte("keep"), 0o644)
			_, err := openRoot(t, root).Extract(tarOf(t, tc.hdrs...), ExtractOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("extract: %v, want %v", err, tc.want)
			}
			entries, _ := os.ReadDir(base)
			if len(entries) != 2 {
				t.Errorf("outside the root: %v", entries)
			}
			if _, err := os.Stat(filepath.Join(base, "x")); !os.IsNotExist(err) {
				t.Errorf("x written outside the root")
			}
		})
	}
}

// TestExtractWithin: with Within, entries beside the named one are refused.
func TestExtractWithin(t *testing.T) {
	dir := t.TempDir()
	b := tarOf(t, &tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "out/f", Typeflag: tar.TypeReg}, &tar.Header{Name: ".env", Typeflag: tar.TypeReg})
	_, err := openRoot(t, dir).Extract(b, ExtractOptions{Within: "out"})
	if !errors.Is(err, runbox.ErrEscapesRoot) {
		t.Fatalf("extract: %v, want ErrEscapesRoot", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".env")); !os.IsNotExist(err) {
		t.Errorf(".env written beside the copy")
	}
}

// TestArchiveExtractRoundTrip: modes, mtimes, links, empty dirs and a
// read-only directory survive Archive then Extract.
func TestArchiveExtractRoundTrip(t *testing.T) {
	src := t.TempDir()
	mt := time.Unix(1500000000, 987654321)
	os.MkdirAll(filepath.Join(src, "d", "empty"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f"), []byte("data"), 0o600)
	os.Chtimes(filepath.Join(src, "d", "f"), mt, mt)
	os.Symlink("/etc", filepath.Join(src, "etc"))
	os.Mkdir(filepath.Join(src, "ro"), 0o755)
	os.WriteFile(filepath.Join(src, "ro", "g"), nil, 0o644)
	os.Chmod(filepath.Join(src, "ro"), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "ro"), 0o755) })

	var b bytes.Buffer
	if err := openRoot(t, src).Archive(&b, ".", ArchiveOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	cache := NewHashCache(0)
	st, err := openRoot(t, dst).Extract(&b, ExtractOptions{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "ro"), 0o755) })
	if st.Files != 2 || st.Links != 1 || st.Dirs != 3 || st.Bytes != 4 {
		t.Errorf("stats %+v", st)
	}
	fi, err := os.Lstat(filepath.Join(dst, "d", "f"))
	if err != nil || fi.Mode() != 0o600 || !fi.ModTime().Equal(mt) {
		t.Errorf("d/f: %v %v, %v", fi.Mode(), fi.ModTime(), err)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "etc")); l != "/etc" {
		t.Errorf("etc links to %q", l)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "ro")); fi.Mode().Perm() != 0o555 {
		t.Errorf("ro mode %v", fi.Mode())
	}
	// The extraction hashed what it wrote: the manifest knows the digest.
	var sums int
	openRoot(t, dst).Manifest(".", nil, cache, func(fi runbox.FileInfo) error {
		if fi.SHA256 != nil {
			sums++
		}
		return nil
	})
	if sums != 2 {
		t.Errorf("manifest after extract knows %d digests, want 2", sums)
	}
}

// TestExtractModesExact: new files get their entry's mode exactly, bits the
// umask would strip included, except setuid and setgid, which are dropped
// and counted (security rule 4: before, a 4755 entry made a setuid file,
// on the caller's side of a pull too), and an existing file is replaced by a new
// inode (a hard link to the old one keeps the old content), never written in
// place.
func TestExtractModesExact(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	os.WriteFile(old, []byte("prev"), 0o600)
	if err := os.Link(old, filepath.Join(dir, "old-link")); err != nil {
		t.Fatal(err)
	}
	modes := map[string]int64{"rwx": 0o777, "rw": 0o666, "suid": 0o4755, "sgid": 0o2755, "ugs": 0o6711, "sticky": 0o1644, "ro": 0o400, "old": 0o640}
	var hdrs []*tar.Header
	for name, mode := range modes {
		hdrs = append(hdrs, &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode})
	}
	hdrs = append(hdrs, &tar.Header{Name: "sgiddir", Typeflag: tar.TypeDir, Mode: 0o2775})
	modes["sgiddir"] = 0o2775
	est, err := openRoot(t, dir).Extract(tarOf(t, hdrs...), ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if est.Stripped != 4 {
		t.Errorf("Stripped = %d, want 4", est.Stripped)
	}
	for name, mode := range modes {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		mode &^= 0o6000
		if got := int64(st.Mode & 0o7777); got != mode {
			t.Errorf("%s: mode %#o, want %#o", name, got, mode)
		}
	}
	if b, _ := os.ReadFile(old); string(b) != "x" {
		t.Errorf("old holds %q, want the archive's content", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "old-link")); string(b) != "prev" {
		t.Errorf("old was written in place: its other link holds %q", b)
	}
}

// TestExtractTruncated: an archive that ends inside a file's data fails,
// and leaves neither a partial new file nor a damaged existing one nor a
// temporary file.
func TestExtractTruncated(t *testing.T) {
	for _, name := range []string{"new", "old"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "old"), []byte("prev"), 0o644)
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 20})
			tw.Write(bytes.Repeat([]byte("y"), 64<<10))
			cut := b.Len()
			_, err := openRoot(t, dir).Extract(bytes.NewReader(b.Bytes()[:cut]), ExtractOptions{})
			if err == nil {
				t.Fatal("a truncated archive extracted without error")
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 || entries[0].Name() != "old" {
				t.Errorf("left behind: %v", entries)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "old")); string(got) != "prev" {
				t.Errorf("old holds %q", got)
			}
		})
	}
}

// TestArchiveEntries: named entries are archived as what they are now: a
// file with its data, a directory, a symlink as a link; a fifo is left out
// (without blocking on it) and a missing entry is ErrFileNotFound.
func TestArchiveEntries(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "d", "e"), 0o750)
	os.WriteFile(filepath.Join(src, "d", "f"), []byte("data"), 0o640)
	os.Symlink("../nowhere", filepath.Join(src, "d", "l"))
	if err := unix.Mkfifo(filepath.Join(src, "d", "p"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	err := openRoot(t, src).Archive(&b, ".", ArchiveOptions{Entries: []string{"d", "d/e", "d/f", "d/l", "d/p"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got[h.Name] = h
	}
	if len(got) != 4 {
		t.Errorf("entries %v, want d/, d/e/, d/f, d/l", got)
	}
	if h := got["d/e/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o750 {
		t.Errorf("d/e/: %+v", h)
	}
	if h := got["d/f"]; h == nil || h.Typeflag != tar.TypeReg || h.Size != 4 || h.Mode != 0o640 {
		t.Errorf("d/f: %+v", h)
	}
	if h := got["d/l"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../nowhere" {
		t.Errorf("d/l: %+v", h)
	}
	err = openRoot(t, src).Archive(io.Discard, ".", ArchiveOptions{Entries: []string{"d/missing"}})
	if !errors.Is(err, runbox.ErrFileNotFound) {
		t.Errorf("missing entry: %v, want ErrFileNotFound", err)
	}
}

// TestCleanEntryName: names a Linux host cannot represent are refused.
func TestCleanEntryName(t *testing.T) {
	for name, want := range map[string]error{
		"a\x00b": runbox.ErrInvalidPath, "": runbox.ErrInvalidPath, strings.Repeat("n", 256): runbox.ErrInvalidPath,
		"/abs": runbox.ErrEscapesRoot, "a/../..": runbox.ErrEscapesRoot, "./a//b/": nil,
	} {
		if _, err := CleanEntryName(name); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("CleanEntryName(%q): %v, want %v", name, err, want)
		}
	}
	if got, _ := CleanEntryName("./a//b/"); got != "a/b" {
		t.Errorf("CleanEntryName(./a//b/) = %q", got)
	}
}

func TestMatcher(t *testing.T) {
	m, err := NewMatcher([]string{"# comment", "*.log", "!keep.log", "/build/", "node_modules", "docs/**/*.tmp", "a/**"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		dir  bool
		excl bool
	}{
		{"x.log", false, true},
		{"deep/y.log", false, true},
		{"keep.log", false, false},
		{"build", true, true},
		{"build", false, false},
		{"src/build", true, false},
		{"src/node_modules", true, true},
		{"src/node_modules/pkg/index.js", false, true},
		{"docs/a/b/c.tmp", false, true},
		{"docs/c.tmp", false, true},
		{"other/c.tmp", false, false},
		{"a/x/y", false, true},
		{"a", true, false},
		{"main.go", false, false},
	} {
		if got := m.Excluded(tc.path, tc.dir); got != tc.excl {
			t.Errorf("Excluded(%q, dir=%v) = %v, want %v", tc.path, tc.dir, got, tc.excl)
		}
	}
	if _, err := NewMatcher([]string{"[abc"}); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("bad pattern: %v", err)
	}
}

func TestDiff(t *testing.T) {
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	file := func(p string, size int64, mt time.Time, sum string) runbox.FileInfo {
		var s []byte
		if sum != "" {
			s = []byte(sum)
		}
		return runbox.FileInfo{Path: p, Mode: 0o644, Size: size, ModTime: mt, SHA256: s}
	}
	dir := func(p string) runbox.FileInfo { return runbox.FileInfo{Path: p, Mode: fs.ModeDir | 0o755, ModTime: t0} }
	src := []runbox.FileInfo{dir("d"), file("d/same", 1, t0, ""), file("d/touched", 1, t1, "A"), file("d/changed", 1, t1, "B"),
		file("d/grown", 2, t0, ""), file("new", 1, t0, ""), file("was-dir", 1, t0, "")}
	dst := []runbox.FileInfo{dir("d"), file("d/same", 1, t0, ""), file("d/touched", 1, t0, "A"), file("d/changed", 1, t0, "C"),
		file("d/grown", 1, t0, ""), dir("was-dir"), file("was-dir/x", 1, t0, ""), dir("gone"), file("gone/y", 1, t0, "")}
	p, err := Diff(src, dst, true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Send, " "); got != "d d/changed d/grown new was-dir" {
		t.Errorf("send %q", got)
	}
	if got := strings.Join(p.Delete, " "); got != "was-dir gone" {
		t.Errorf("delete %q", got)
	}
	if len(p.Touch) != 1 || p.Touch[0].Path != "d/touched" || p.Skipped != 2 || p.Bytes != 5 || p.Files != 4 {
		t.Errorf("plan %+v", p)
	}
}

// TestNULPathIsInvalidPath: a path with a NUL byte (which a JSON client can
// send) is ErrInvalidPath for every call, not the kernel's EINVAL.
func TestNULPathIsInvalidPath(t *testing.T) {
	f := openRoot(t, t.TempDir())
	calls := map[string]func() error{
		"stat":   func() error { _, err := f.Stat("a\x00b", false); return err },
		"open":   func() error { _, _, err := f.OpenFile("a\x00b"); return err },
		"mkdir":  func() error { return f.Mkdir("d/a\x00b", 0o755, true) },
		"remove": func() error { return f.Remove("a\x00b", false) },
		"move":   func() error { return f.Move("a", "b\x00") },
		"write": func() error {
			_, err := f.WriteFile("a\x00b", strings.NewReader("x"), WriteOptions{})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, runbox.ErrInvalidPath) {
			t.Errorf("%s: %v, want ErrInvalidPath", name, err)
		}
	}
}
