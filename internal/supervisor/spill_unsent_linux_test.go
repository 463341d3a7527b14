package supervisor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// randomFile writes n random bytes to a new file and returns its path and
// its contents.
func randomFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(rand.Uint32())
	}
	path := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// newUnsentSup is a supervisor with its own spill directory, a small ring
// and a short wait for the live stream at an exec's end.
func newUnsentSup(t *testing.T, ring int, drain time.Duration) (*Supervisor, string) {
	t.Helper()
	return newUnsentSupCatchUp(t, ring, drain, 100*time.Millisecond)
}

// newUnsentSupCatchUp is newUnsentSup with the time an exec's end waits
// for a live stream to send the rest given.
func newUnsentSupCatchUp(t *testing.T, ring int, drain, catchUp time.Duration) (*Supervisor, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := New(Config{CgroupMode: "off", Retention: time.Minute, Version: "test", RingBytes: ring,
		Drain: drain, SpillDir: dir, liveCatchUp: catchUp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	return s, dir
}

// spillFiles lists the files in a spill directory.
func spillFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A live stream that reads every byte as it comes: nothing goes to disk,
// however large the output.
func TestSpillUnsentLiveReaderNoSpill(t *testing.T) {
	// A reader that keeps reading is live however slow this machine is:
	// the catch-up bound is generous here (100 ms lost a CI-like run
	// under load), the behaviour asserted is "no spill", not a timing.
	s, dir := newUnsentSupCatchUp(t, 64<<10, 0, time.Minute)
	src, data := randomFile(t, 6<<20)
	for round := range 5 {
		e, r, _, err := s.StartFollowing(runbox.ExecSpec{Argv: []string{"cat", src}, Spill: runbox.SpillUnsent})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := collect(t, r, round%2 == 1)
		r.Close()
		res := waitResult(t, e)
		if !bytes.Equal(got, data) {
			t.Fatalf("round %d: streamed %d bytes, differ from the output", round, len(got))
		}
		if res.StdoutSpill != "" || res.StdoutSpillOffset != 0 {
			t.Fatalf("round %d: a live reader got a spill: %q at %d", round, res.StdoutSpill, res.StdoutSpillOffset)
		}
		if names := spillFiles(t, dir); len(names) > 0 {
			t.Fatalf("round %d: spill files on disk: %v", round, names)
		}
		if res.StdoutBytes != int64(len(data)) || !bytes.Equal(res.Stdout[:DefaultHeadBytes], data[:DefaultHeadBytes]) {
			t.Fatalf("round %d: result counts %d bytes or its head differs", round, res.StdoutBytes)
		}
	}
	// Without a live stream SpillUnsent is SpillAuto: all of it, from 0.
	res := run(t, s, runbox.ExecSpec{Argv: []string{"cat", src}, Spill: runbox.SpillUnsent})
	if b, err := os.ReadFile(res.StdoutSpill); err != nil || !bytes.Equal(b, data) || res.StdoutSpillOffset != 0 {
		t.Fatalf("no live stream: spill %q (%v) at %d holds %d bytes, want all %d", res.StdoutSpill, err, res.StdoutSpillOffset, len(b), len(data))
	}
}

// A live stream that disconnects mid-stream: each stream spills from the
// first byte it had not sent, exactly, to the end.
func TestSpillUnsentDisconnectSpillsFromThere(t *testing.T) {
	s, dir := newUnsentSup(t, 64<<10, 0)
	src, data := randomFile(t, 5<<20)
	for round := range 20 {
		e, r, _, err := s.StartFollowing(runbox.ExecSpec{Argv: []string{"cat", src}, Spill: runbox.SpillUnsent})
		if err != nil {
			t.Fatal(err)
		}
		stop := 1 + rand.IntN(4<<20) // leave after this many bytes
		var got, last []byte
		for len(got) < stop {
			ev, err := r.Next(context.Background())
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if ev.Gap != nil {
				t.Fatalf("round %d: a connected reader saw a gap %+v", round, ev.Gap)
			}
			got = append(got, ev.Chunk.Data...)
			last = ev.Chunk.Data
			if rand.IntN(4) == 0 {
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
			}
		}
		// The last chunk was read but its send never confirmed (no Next
		// after it): the spill starts with it.
		sent := int64(len(got) - len(last))
		r.Close()
		res := waitResult(t, e)
		if res.StdoutSpillOffset != sent {
			t.Fatalf("round %d: spill starts at %d, want %d (the first unsent byte)", round, res.StdoutSpillOffset, sent)
		}
		b, err := os.ReadFile(res.StdoutSpill)
		if err != nil || !bytes.Equal(b, data[sent:]) {
			t.Fatalf("round %d: spill %q (%v) holds %d bytes, want the %d from %d on", round, res.StdoutSpill, err, len(b), len(data)-int(sent), sent)
		}
		if !bytes.Equal(got, data[:len(got)]) {
			t.Fatalf("round %d: streamed bytes differ", round)
		}
		os.Remove(res.StdoutSpill)
		if names := spillFiles(t, dir); len(names) > 0 {
			t.Fatalf("round %d: other spill files: %v", round, names)
		}
	}
}

// A live stream that pauses while the command's background writer keeps
// writing after its leader exited: the drain does not wait for it, so
// output leaves the ring unsent. The stream sees a gap, and the spill
// starts at the first byte it missed and holds everything from there.
func TestSpillUnsentSlowReaderGapAndSpill(t *testing.T) {
	const ring = 64 << 10
	s, _ := newUnsentSup(t, ring, time.Minute)
	size := ring + drainSlackBytes + 4<<20
	src, data := randomFile(t, size)
	for round := range 4 {
		e, r, _, err := s.StartFollowing(runbox.ExecSpec{Command: "cat " + src + " & exit 0", Spill: runbox.SpillUnsent})
		if err != nil {
			t.Fatal(err)
		}
		before := rand.IntN(1 << 20) // read this much, then pause until the exec ends
		var got []byte
		firstGap := -1
		var gapBytes, delivered int64
		for {
			if before >= 0 && len(got) >= before {
				before = -1
				<-e.Done()
			}
			ev, err := r.Next(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Gap != nil {
				if firstGap < 0 {
					firstGap = len(got)
				}
				gapBytes += ev.Gap.Bytes
				continue
			}
			if firstGap < 0 {
				got = append(got, ev.Chunk.Data...)
			}
			delivered += int64(len(ev.Chunk.Data))
			if rand.IntN(8) == 0 {
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			}
		}
		r.Close()
		res := waitResult(t, e)
		if firstGap < 0 {
			t.Fatalf("round %d: no gap though %d bytes left a %d-byte ring unread", round, size, ring)
		}
		if !bytes.Equal(got, data[:firstGap]) {
			t.Fatalf("round %d: bytes before the gap differ", round)
		}
		off := res.StdoutSpillOffset
		// The spill starts at the first byte not sent: at most the chunk
		// the reader held when it paused before the gap.
		if off > int64(firstGap) || int64(firstGap)-off > readChunkSize {
			t.Fatalf("round %d: spill starts at %d, the gap at %d", round, off, firstGap)
		}
		b, err := os.ReadFile(res.StdoutSpill)
		if err != nil || !bytes.Equal(b, data[off:]) {
			t.Fatalf("round %d: spill %q (%v) holds %d bytes, want the %d from %d on", round, res.StdoutSpill, err, len(b), size-int(off), off)
		}
		if delivered+gapBytes != int64(size) {
			t.Fatalf("round %d: delivered %d + gaps %d != %d", round, delivered, gapBytes, size)
		}
		if res.StdoutBytes != int64(size) {
			t.Fatalf("round %d: result counts %d bytes of %d", round, res.StdoutBytes, size)
		}
		os.Remove(res.StdoutSpill)
	}
}

// The store's own decision, without processes: the first unsent chunk the
// ring lets go decides the spill's start, and the spill starts with the
// chunks from there that the ring still held.
func TestSpillUnsentStoreStartsAtFirstMissedChunk(t *testing.T) {
	o := newOutputStore(4, 2, 2, runbox.SpillUnsent)
	r := o.flowReader()
	o.setLive(r)
	defer r.Close()
	add := func(b string) (bool, [][]byte) { return o.append(runbox.Stdout, []byte(b)) }
	add("ab")
	add("cd")
	if ev, _ := r.Next(context.Background()); string(ev.Chunk.Data) != "ab" {
		t.Fatalf("first chunk %+v", ev)
	}
	if ev, _ := r.Next(context.Background()); string(ev.Chunk.Data) != "cd" {
		t.Fatalf("second chunk %+v", ev)
	}
	// "ab" is sent, "cd" is held; the drain stops waiting for the reader.
	o.startDrain()
	big := string(bytes.Repeat([]byte{'e'}, 64<<10))
	for i := range drainSlackBytes/len(big) + 2 {
		start, prior := add(big)
		if start {
			if i == 0 || o.spillFrom[0] != 2 || len(prior) == 0 || string(prior[0]) != "cd" {
				t.Fatalf("spill started at add %d from %d with %d chunks", i, o.spillFrom[0], len(prior))
			}
			return
		}
	}
	t.Fatal("the ring let unsent output go without a spill")
}
