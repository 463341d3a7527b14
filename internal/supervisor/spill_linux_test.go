package supervisor

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

func TestSpillHoldsFullOutput(t *testing.T) {
	s := newSup(t, "auto")
	// 5 MB of varied bytes with a 16 KiB head and tail.
	src := filepath.Join(t.TempDir(), "src")
	data := make([]byte, 5<<20)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, s, runbox.ExecSpec{Argv: []string{"cat", src}, HeadBytes: 16 << 10, TailBytes: 16 << 10})
	want := append(append([]byte{}, data[:16<<10]...), data[len(data)-16<<10:]...)
	if !bytes.Equal(r.Stdout, want) {
		t.Errorf("head+tail differ")
	}
	if r.StdoutDropped != int64(len(data)-32<<10) || r.StdoutBytes != int64(len(data)) {
		t.Errorf("dropped %d bytes %d", r.StdoutDropped, r.StdoutBytes)
	}
	spilled, err := os.ReadFile(r.StdoutSpill)
	if err != nil {
		t.Fatalf("spill file %q: %v", r.StdoutSpill, err)
	}
	if !bytes.Equal(spilled, data) {
		t.Errorf("spill file holds %d bytes, differs from the output", len(spilled))
	}
	if r.StderrSpill != "" {
		t.Errorf("stderr spilled without output: %q", r.StderrSpill)
	}
	small := run(t, s, runbox.ExecSpec{Command: "echo hi"})
	if small.StdoutSpill != "" {
		t.Errorf("small output spilled")
	}
	always := run(t, s, runbox.ExecSpec{Command: "echo hi", Spill: runbox.SpillAlways})
	if b, _ := os.ReadFile(always.StdoutSpill); string(b) != "hi\n" {
		t.Errorf("spill always: %q", b)
	}
}

func TestSpillBudgetEvictsOldestFirst(t *testing.T) {
	d := newSpillDir(t.TempDir(), 10)
	a := d.create("a")
	d.write(a, []byte("123456"))
	pa, _ := d.finish(a)
	b := d.create("b")
	d.write(b, []byte("abcdef"))
	if _, err := os.Stat(pa); !os.IsNotExist(err) {
		t.Errorf("oldest file not evicted: %v", err)
	}
	d.write(b, []byte("ghijkl"))
	pb, truncated := d.finish(b)
	got, _ := os.ReadFile(pb)
	if string(got) != "abcdefghij" || !truncated {
		t.Errorf("got %q truncated=%v", got, truncated)
	}
}

// TestSpillDirAndPartialSpill: spill files go to Config.SpillDir; a stream
// past the budget keeps exactly its first bytes and reports truncated; a
// spill directory that cannot be made reports truncated with no file.
func TestSpillDirAndPartialSpill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill-here")
	s, err := New(Config{Retention: time.Minute, SpillDir: dir, SpillBytes: 100 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) }) // Shutdown is idempotent
	r := run(t, s, runbox.ExecSpec{Command: "head -c 300000 /dev/zero | tr '\\0' x; printf y"})
	if filepath.Dir(r.StdoutSpill) != dir || !r.SpillTruncated {
		t.Fatalf("spill %q truncated %v; want a truncated file in %s", r.StdoutSpill, r.SpillTruncated, dir)
	}
	got, err := os.ReadFile(r.StdoutSpill)
	if err != nil {
		t.Fatal(err)
	}
	if want := bytes.Repeat([]byte("x"), 100<<10); !bytes.Equal(got, want) {
		t.Errorf("spill file holds %d bytes; want exactly the first %d of the stream", len(got), len(want))
	}
	shutdown(t, s) // one supervisor (one reaper) per process at a time

	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := New(Config{Retention: time.Minute, SpillDir: filepath.Join(notADir, "spill")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s2) })
	r = run(t, s2, runbox.ExecSpec{Command: "echo hi", Spill: runbox.SpillAlways})
	if r.StdoutSpill != "" || !r.SpillTruncated || string(r.Stdout) != "hi\n" {
		t.Errorf("spill dir that cannot be made: spill %q truncated %v stdout %q; want no file, truncated, output intact",
			r.StdoutSpill, r.SpillTruncated, r.Stdout)
	}
}

// TestExecIDIsIdempotencyKey: the same id with the same spec attaches; with
// another spec it is refused, naming the id and what differs.
func TestExecIDIsIdempotencyKey(t *testing.T) {
	s := newSup(t, "auto")
	spec := runbox.ExecSpec{ID: "idem-1", Command: "echo a", Env: map[string]string{"A": "1"}, PTY: nil}
	first := run(t, s, spec)
	e, attached, err := s.Start(spec)
	if err != nil || !attached || waitResult(t, e).Pid != first.Pid {
		t.Fatalf("same spec: attached %v err %v; want the first exec", attached, err)
	}
	for what, other := range map[string]runbox.ExecSpec{
		"command": {ID: "idem-1", Command: "echo b", Env: map[string]string{"A": "1"}},
		"env":     {ID: "idem-1", Command: "echo a", Env: map[string]string{"A": "2"}},
		"stdin":   {ID: "idem-1", Command: "echo a", Env: map[string]string{"A": "1"}, Stdin: []byte("x")},
		"session": {ID: "idem-1", Command: "echo a", Env: map[string]string{"A": "1"}, Session: "s"},
	} {
		_, _, err := s.Start(other)
		if !errors.Is(err, runbox.ErrExecIDConflict) || !strings.Contains(err.Error(), `"idem-1"`) || !strings.Contains(err.Error(), what) {
			t.Errorf("different %s: %v; want ErrExecIDConflict naming the id and %s", what, err, what)
		}
	}
}

// TestSpillNeverFollowsAPlantedLink: a command that can write the spill
// directory plants a link where the next spill file will be; the spill
// goes into a fresh file, and the link's target is untouched.
func TestSpillNeverFollowsAPlantedLink(t *testing.T) {
	dir, outside := t.TempDir(), filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "e1.stdout")); err != nil {
		t.Fatal(err)
	}
	d := newSpillDir(dir, 1<<20)
	f := d.create("e1.stdout")
	d.write(f, []byte("spilled"))
	p, truncated := d.finish(f)
	if got, _ := os.ReadFile(outside); string(got) != "keep" {
		t.Errorf("the link's target was written: %q", got)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "spilled" || truncated {
		t.Errorf("spill file %s: %q, %v, truncated=%v", p, got, err, truncated)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("spill file %s is still a link: %v", p, err)
	}
}
