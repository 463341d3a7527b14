package supervisor

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

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
	r := o.reader(0)
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
