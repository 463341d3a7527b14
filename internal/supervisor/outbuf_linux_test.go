package supervisor

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// Every test of this package runs with released output buffers poisoned:
// a holder that let a buffer go too early reads 0xEE bytes, not the
// command's output.
func init() { poisonReleasedOutBufs.Store(true) }

// readAtOffsets reads r to the end and checks every chunk of stdout against
// data at the chunk's stream offset (a gap moves the offset by its bytes).
// It returns the bytes it saw.
func readAtOffsets(t *testing.T, r *OutputReader, data []byte, off int64) (seen int64) {
	t.Helper()
	for {
		ev, err := r.Next(context.Background())
		if err == io.EOF {
			return seen
		}
		if err != nil {
			t.Error(err)
			return seen
		}
		if ev.Gap != nil {
			off += ev.Gap.Bytes
			continue
		}
		d := ev.Chunk.Data
		if off+int64(len(d)) > int64(len(data)) || !bytes.Equal(d, data[off:off+int64(len(d))]) {
			t.Errorf("chunk %d of %d bytes at offset %d differs from the output", ev.Chunk.Seq, len(d), off)
			return seen
		}
		off += int64(len(d))
		seen += int64(len(d))
	}
}

// Output buffers are reused once nothing holds them: the ring, a reader
// holding the chunk it was given, a reader that replays the ring, the spill
// writer. A reader that holds a chunk while the drain evicts it from the
// ring (a background writer outran it) still has the chunk's bytes, and
// the spill, the replay and the result's head and tail hold the output.
func TestOutputBuffersHeldByEveryHolder(t *testing.T) {
	s, _ := newUnsentSup(t, 512<<10, 10*time.Second)
	src, data := randomFile(t, 14<<20)
	for round := range 3 {
		e, r, _, err := s.StartFollowing(runbox.ExecSpec{Command: "cat " + src + " & exit 0", Spill: runbox.SpillAlways})
		if err != nil {
			t.Fatal(err)
		}
		// A second reader follows from the start on its own goroutine.
		var wg sync.WaitGroup
		other := e.Output(1)
		wg.Go(func() {
			defer other.Close()
			readAtOffsets(t, other, data, 0)
		})
		// The first reads a little, then holds its last chunk until the
		// exec is done: the drain evicts it from the ring meanwhile.
		var off int64
		var held *runbox.Chunk
		for off < 1<<20 {
			ev, err := r.Next(context.Background())
			if err != nil || ev.Gap != nil {
				t.Fatalf("round %d: %v %+v", round, err, ev.Gap)
			}
			held = ev.Chunk
			off += int64(len(held.Data))
		}
		res := waitResult(t, e)
		heldOff := off - int64(len(held.Data))
		if !bytes.Equal(held.Data, data[heldOff:off]) {
			t.Fatalf("round %d: the held chunk %d at %d changed once the ring let it go", round, held.Seq, heldOff)
		}
		readAtOffsets(t, r, data, off)
		r.Close()
		wg.Wait()
		// A late reader replays what the ring kept: the end of the output.
		late := e.Output(1)
		if n := readAtOffsets(t, late, data, 0); n == 0 {
			t.Errorf("round %d: the replay held nothing", round)
		}
		late.Close()
		b, err := os.ReadFile(res.StdoutSpill)
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("round %d: spill %q (%v) holds %d bytes, differs from the %d of the output", round, res.StdoutSpill, err, len(b), len(data))
		}
		os.Remove(res.StdoutSpill)
		head, tail := DefaultHeadBytes, DefaultTailBytes
		want := append(append([]byte{}, data[:head]...), data[len(data)-tail:]...)
		if res.StdoutBytes != int64(len(data)) || !bytes.Equal(res.Stdout, want) || res.StdoutDropped != int64(len(data)-head-tail) {
			t.Fatalf("round %d: result counts %d bytes, drops %d, or its head and tail differ", round, res.StdoutBytes, res.StdoutDropped)
		}
	}
}
