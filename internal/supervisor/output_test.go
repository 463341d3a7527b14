package supervisor

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

func TestHeadTailExact(t *testing.T) {
	for _, tc := range []struct{ head, tail, total, chunk int }{
		{4, 4, 3, 1}, {4, 4, 8, 3}, {4, 4, 100, 7}, {4, 4, 100, 50}, {0, 5, 20, 3}, {5, 0, 20, 3}, {16, 16, 1000, 1},
	} {
		h := headTail{headLimit: tc.head, tailLimit: tc.tail}
		all := make([]byte, tc.total)
		for i := range all {
			all[i] = byte(rand.IntN(256))
		}
		for p := all; len(p) > 0; {
			n := min(tc.chunk, len(p))
			h.write(p[:n])
			p = p[n:]
		}
		got, dropped := h.result()
		want := all
		if tc.total > tc.head+tc.tail {
			want = append(append([]byte{}, all[:tc.head]...), all[tc.total-tc.tail:]...)
		}
		if !bytes.Equal(got, want) || dropped != int64(tc.total-len(want)) {
			t.Errorf("%+v: got %v dropped %d, want %v", tc, got, dropped, want)
		}
	}
}

func TestReaderReplayAndGap(t *testing.T) {
	o := newOutputStore(10, 4, 4, runbox.SpillNever)
	for i := range 6 {
		s := runbox.Stdout
		if i%2 == 1 {
			s = runbox.Stderr
		}
		o.append(s, []byte{byte('a' + i), byte('a' + i), byte('a' + i)})
	}
	o.closeStream()
	o.closeStream()
	// Each ring holds 10 bytes: stdout keeps seqs 3,5 and stderr 4,6 (3 bytes each, 3 chunks = 9).
	r := o.reader(0)
	var seqs []uint64
	var gapBytes int64
	for {
		ev, err := r.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Gap != nil {
			gapBytes += ev.Gap.Bytes
			continue
		}
		seqs = append(seqs, ev.Chunk.Seq)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("out of order: %v", seqs)
		}
	}
	delivered := int64(3 * len(seqs))
	if delivered+gapBytes != 18 {
		t.Errorf("delivered %d + gap %d != 18 (seqs %v)", delivered, gapBytes, seqs)
	}
	r = o.reader(5)
	ev, _ := r.Next(context.Background())
	if ev.Chunk == nil || ev.Chunk.Seq != 5 {
		t.Errorf("from 5: %+v", ev)
	}
}

func TestFollowerGetsEveryByteDespiteSmallRing(t *testing.T) {
	o := newOutputStore(64, 8, 8, runbox.SpillNever)
	r := o.flowReader()
	defer r.Close()
	var want []byte
	go func() {
		for i := range 1000 {
			chunk := []byte{byte(i), byte(i >> 8), 'x'}
			want = append(want, chunk...)
			o.append(runbox.Stdout, chunk)
		}
		o.closeStream()
		o.closeStream()
	}()
	var got []byte
	for {
		ev, err := r.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Gap != nil {
			t.Fatalf("follower saw a gap: %+v", ev.Gap)
		}
		got = append(got, ev.Chunk.Data...)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got %d bytes, want %d", len(got), len(want))
	}
}

// collect reads r to EOF, failing on a gap, and returns each stream's bytes.
func collect(t *testing.T, r *OutputReader, slow bool) (stdout, stderr []byte) {
	t.Helper()
	for {
		ev, err := r.Next(context.Background())
		if err == io.EOF {
			return stdout, stderr
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Gap != nil {
			t.Fatalf("follower saw a gap: %+v", ev.Gap)
		}
		if ev.Chunk.Stream == runbox.Stdout {
			stdout = append(stdout, ev.Chunk.Data...)
		} else {
			stderr = append(stderr, ev.Chunk.Data...)
		}
		if slow && rand.IntN(8) == 0 {
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		}
	}
}

// A chunk can need several older, smaller chunks evicted to fit: the
// producer must wait until the follower has read all of them, not only the
// oldest.
func TestFollowerGetsEveryByteWithMixedChunkSizes(t *testing.T) {
	for round := range 50 {
		o := newOutputStore(64, 8, 8, runbox.SpillNever)
		r := o.flowReader()
		var want [2][]byte
		go func() {
			for i := range 400 {
				s := runbox.Stream(1 + rand.IntN(2))
				chunk := bytes.Repeat([]byte{byte(i)}, 1+rand.IntN(40))
				want[s-1] = append(want[s-1], chunk...)
				o.append(s, chunk)
			}
			o.closeStream()
			o.closeStream()
		}()
		stdout, stderr := collect(t, r, true)
		r.Close()
		if !bytes.Equal(stdout, want[0]) || !bytes.Equal(stderr, want[1]) {
			t.Fatalf("round %d: got %d+%d bytes, want %d+%d", round, len(stdout), len(stderr), len(want[0]), len(want[1]))
		}
	}
}

// After the leader exits the producer no longer waits for a follower, but
// output the follower has not read stays (up to drainSlackBytes beyond the
// ring), so a slow client still gets every byte; beyond that it sees a gap
// that counts exactly what it lost.
func TestDrainKeepsUnreadOutputForFollower(t *testing.T) {
	const ring = 1 << 10
	o := newOutputStore(ring, 8, 8, runbox.SpillNever)
	r := o.flowReader()
	defer r.Close()
	var want []byte
	add := func(n int) {
		chunk := make([]byte, n)
		for i := range chunk {
			chunk[i] = byte(len(want) + i)
		}
		want = append(want, chunk...)
		o.append(runbox.Stdout, chunk)
	}
	add(ring) // the ring is full of output the follower has not read
	o.startDrain()
	done := make(chan struct{})
	go func() { // must not block: nobody reads until it is done
		defer close(done)
		for range 16 {
			add(ring / 4)
		}
		o.closeStream()
		o.closeStream()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the drain waited for the follower")
	}
	got, _ := collect(t, r, false)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d", len(got), len(want))
	}

	// Past the slack the oldest unread output goes, and the gap says how much.
	o = newOutputStore(ring, 8, 8, runbox.SpillNever)
	r2 := o.flowReader()
	defer r2.Close()
	o.startDrain()
	total := ring + drainSlackBytes + 3*ring
	for range total / ring {
		o.append(runbox.Stdout, make([]byte, ring))
	}
	o.closeStream()
	o.closeStream()
	var delivered, lost int64
	for {
		ev, err := r2.Next(context.Background())
		if err == io.EOF {
			break
		}
		if ev.Gap != nil {
			lost += ev.Gap.Bytes
			continue
		}
		delivered += int64(len(ev.Chunk.Data))
	}
	if lost != 3*ring || delivered+lost != int64(total) {
		t.Errorf("delivered %d lost %d of %d; want lost %d", delivered, lost, total, 3*ring)
	}
}
