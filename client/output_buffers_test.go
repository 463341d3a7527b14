package client_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// checkWriter compares what is written to it with want, as it arrives.
type checkWriter struct {
	want []byte
	n    int
	bad  bool
}

func (w *checkWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > len(w.want) || !bytes.Equal(p, w.want[w.n:w.n+len(p)]) {
		w.bad = true
	}
	w.n += len(p)
	return len(p), nil
}

// The client reuses a chunk's buffer once its writer has it, but never one
// a WithOnChunk callback was given: two execs at once, one written to
// writers, one whose chunks a callback keeps, each gets the command's
// bytes, and the kept chunks still hold them after both ended.
func TestOutputBuffersReusedOnlyWhenNoOneKeepsThem(t *testing.T) {
	c := newClient(t)
	data := make([]byte, 12<<20)
	rand.Read(data)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := "cat " + src + " & cat " + src + " >&2; wait"
	for round := range 3 {
		var wg sync.WaitGroup
		stdout, stderr := &checkWriter{want: data}, &checkWriter{want: data}
		wg.Go(func() {
			res, err := c.Exec(testCtx(t), cmd, client.WithStdout(stdout), client.WithStderr(stderr), client.WithSpill(runbox.SpillUnsent))
			if err != nil || res.StreamGaps != 0 {
				t.Errorf("round %d: %v, %d gaps", round, err, res.StreamGaps)
			}
		})
		var kept [2][][]byte
		res, err := c.Exec(testCtx(t), cmd, client.WithSpill(runbox.SpillUnsent), client.WithOnChunk(func(ch runbox.Chunk) {
			kept[ch.Stream-1] = append(kept[ch.Stream-1], ch.Data)
		}))
		wg.Wait()
		if err != nil || res.StreamGaps != 0 {
			t.Fatalf("round %d: %v, %d gaps", round, err, res.StreamGaps)
		}
		if stdout.bad || stderr.bad || stdout.n != len(data) || stderr.n != len(data) {
			t.Fatalf("round %d: writers got %d and %d bytes (differ: %v %v), want %d", round, stdout.n, stderr.n, stdout.bad, stderr.bad, len(data))
		}
		for i, chunks := range kept {
			if got := bytes.Join(chunks, nil); !bytes.Equal(got, data) {
				t.Fatalf("round %d: stream %d: the kept chunks hold %d bytes that differ from the output", round, i+1, len(got))
			}
		}
	}
}
