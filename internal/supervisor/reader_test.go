package supervisor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/runbox/runbox"
)

// NextBatch returns every ready event, in sequence order across both
// streams, up to its byte bound, and then io.EOF once both streams ended.
func TestNextBatchTakesEveryReadyEvent(t *testing.T) {
	o := newOutputStore(100, 4, 4, runbox.SpillNever)
	r := o.flowReader()
	defer r.Close()
	for i := range 5 {
		o.append(runbox.Stream(1+i%2), []byte{byte('a' + i), byte('a' + i), byte('a' + i)})
	}
	evs, err := r.NextBatch(context.Background(), nil, 1<<20)
	if err != nil || len(evs) != 5 {
		t.Fatalf("batch of %d events (%v), want 5", len(evs), err)
	}
	for i, ev := range evs {
		want := bytes.Repeat([]byte{byte('a' + i)}, 3)
		if ev.Chunk == nil || ev.Chunk.Seq != uint64(i+1) || ev.Chunk.Stream != runbox.Stream(1+i%2) || !bytes.Equal(ev.Chunk.Data, want) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	// The bound: stop once the chunks hold maxBytes or more.
	for i := range 4 {
		o.append(runbox.Stdout, []byte{byte('v' + i), byte('v' + i), byte('v' + i)})
	}
	evs, err = r.NextBatch(context.Background(), evs[:0], 6)
	if err != nil || len(evs) != 2 || evs[0].Chunk.Seq != 6 || evs[1].Chunk.Seq != 7 {
		t.Fatalf("bounded batch %+v (%v), want seqs 6 and 7", evs, err)
	}
	evs, err = r.NextBatch(context.Background(), evs[:0], 6)
	if err != nil || len(evs) != 2 || evs[0].Chunk.Seq != 8 || evs[1].Chunk.Seq != 9 {
		t.Fatalf("next batch %+v (%v), want seqs 8 and 9", evs, err)
	}
	o.closeStream()
	o.closeStream()
	if evs, err = r.NextBatch(context.Background(), evs[:0], 6); !errors.Is(err, io.EOF) || len(evs) != 0 {
		t.Fatalf("at the end: %d events, %v; want io.EOF", len(evs), err)
	}
}

// A batch is kept for the follower until it comes back for the next one:
// a producer whose chunk would evict part of it waits, and the chunks'
// bytes stay intact meanwhile (released buffers are poisoned in tests).
func TestNextBatchKeepsFlowControl(t *testing.T) {
	o := newOutputStore(10, 4, 4, runbox.SpillNever)
	r := o.flowReader()
	defer r.Close()
	chunk := func(i int) chunkData {
		b := getOutBuf()
		d := b.data[:3:3]
		for j := range d {
			d[j] = byte('a' + i)
		}
		return chunkData{data: d, buf: b}
	}
	for i := range 3 {
		o.appendChunk(runbox.Stdout, chunk(i))
	}
	evs, err := r.NextBatch(context.Background(), nil, 1<<20)
	if err != nil || len(evs) != 3 {
		t.Fatalf("batch of %d (%v), want 3", len(evs), err)
	}
	stored := make(chan struct{})
	go func() {
		defer close(stored)
		o.appendChunk(runbox.Stdout, chunk(3)) // 12 bytes > 10: must evict seq 1
	}()
	// Wait until the producer waits (no clock: the store says so).
	for {
		o.mu.Lock()
		waiting := o.producerWait
		o.mu.Unlock()
		if waiting {
			break
		}
		select {
		case <-stored:
			t.Fatal("the producer evicted a chunk of a batch the follower had not sent")
		default:
			runtime.Gosched()
		}
	}
	for i, ev := range evs {
		if !bytes.Equal(ev.Chunk.Data, bytes.Repeat([]byte{byte('a' + i)}, 3)) {
			t.Fatalf("chunk %d of the batch changed while held: %q", ev.Chunk.Seq, ev.Chunk.Data)
		}
	}
	// Coming back says the batch was sent: the producer goes on.
	evs, err = r.NextBatch(context.Background(), evs[:0], 1<<20)
	<-stored
	if err != nil || len(evs) != 1 || evs[0].Chunk.Seq != 4 || !bytes.Equal(evs[0].Chunk.Data, []byte("ddd")) {
		t.Fatalf("after the batch: %+v (%v)", evs, err)
	}
}

// An observer that fell behind the ring gets the gap inside its batch,
// before the chunks after it, with the exact count of bytes it missed.
func TestNextBatchCarriesGaps(t *testing.T) {
	o := newOutputStore(6, 4, 4, runbox.SpillNever)
	for i := range 5 {
		o.append(runbox.Stdout, []byte{byte('a' + i), byte('a' + i), byte('a' + i)})
	}
	r := o.reader(1) // the ring kept seqs 4 and 5
	defer r.Close()
	evs, err := r.NextBatch(context.Background(), nil, 1<<20)
	if err != nil || len(evs) != 3 {
		t.Fatalf("batch %+v (%v), want a gap and two chunks", evs, err)
	}
	if g := evs[0].Gap; g == nil || g.FromSeq != 1 || g.ToSeq != 4 || g.Bytes != 9 {
		t.Fatalf("gap %+v, want seqs 1 to 4, 9 bytes", evs[0])
	}
	if evs[1].Chunk.Seq != 4 || evs[2].Chunk.Seq != 5 || string(evs[2].Chunk.Data) != "eee" {
		t.Fatalf("chunks %+v %+v", evs[1].Chunk, evs[2].Chunk)
	}
}

// A follower reading in batches of random bounds, with a producer writing
// chunks of random sizes to both streams through a small ring, gets every
// byte of each stream, in order, with consecutive sequence numbers and no
// gap. Run it under -race.
func TestNextBatchFollowerGetsEveryByte(t *testing.T) {
	for round := range 50 {
		o := newOutputStore(64, 8, 8, runbox.SpillNever)
		r := o.flowReader()
		var want [2][]byte
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 400 {
				s := runbox.Stream(1 + rand.IntN(2))
				b := getOutBuf()
				d := b.data[:1+rand.IntN(40)]
				for j := range d {
					d[j] = byte(i + j)
				}
				want[s-1] = append(want[s-1], d...)
				o.appendChunk(s, chunkData{data: d[:len(d):len(d)], buf: b})
			}
			o.closeStream()
			o.closeStream()
		})
		var got [2][]byte
		var evs []OutputEvent
		next := uint64(1)
		for {
			var err error
			evs, err = r.NextBatch(context.Background(), evs[:0], rand.IntN(100))
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Gap != nil {
					t.Fatalf("round %d: follower saw a gap %+v", round, ev.Gap)
				}
				if ev.Chunk.Seq != next {
					t.Fatalf("round %d: seq %d, want %d", round, ev.Chunk.Seq, next)
				}
				next++
				got[ev.Chunk.Stream-1] = append(got[ev.Chunk.Stream-1], ev.Chunk.Data...)
			}
		}
		r.Close()
		wg.Wait()
		if !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) {
			t.Fatalf("round %d: got %d+%d bytes, want %d+%d", round, len(got[0]), len(got[1]), len(want[0]), len(want[1]))
		}
	}
}
