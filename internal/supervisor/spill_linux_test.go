package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

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
	a, _ := d.create("a")
	d.write(a, []byte("123456"))
	pa, _ := d.finish(a)
	b, _ := d.create("b")
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
