package supervisor

import (
	"context"
	"io"

	"github.com/runbox/runbox"
)

// OutputReader follows an exec's output from a sequence number. Each reader
// has its own cursor. The reader of the exec's own Run stream
// ([Supervisor.StartFollowing]) has flow control: while it is open, the
// exec's output waits for it rather than drop what it has not read (a
// terminal's flow control). Any other reader ([Exec.Output]) is an
// observer: the command never waits for it, and when it falls behind the
// ring (or starts behind it) it sees a Gap counting what it missed. Close
// it when done.
type OutputReader struct {
	o    *outputStore
	next uint64
	// sent is the first sequence number not known to be sent: everything
	// Next returned before its latest call (the caller came back for
	// more). The store keeps chunks from here on for the reader.
	sent uint64
	eof  bool     // Next returned io.EOF
	off  [2]int64 // stream offset this reader has reached, -1 when unknown
	// held are the buffers of the chunks Next or NextBatch returned last,
	// referenced until the caller comes back for more or closes the reader.
	held []*outBuf
	one  [1]OutputEvent // Next's batch of one
}

// reader returns an observer from sequence number from: the producer
// never waits for it.
func (o *outputStore) reader(from uint64) *OutputReader {
	if from == 0 {
		from = 1
	}
	r := &OutputReader{o: o, next: from, sent: from}
	if from > 1 {
		r.off = [2]int64{-1, -1}
	}
	return r
}

// flowReader returns a reader from the first chunk that the producer waits
// for (a follower): the exec's own Run stream.
func (o *outputStore) flowReader() *OutputReader {
	r := o.reader(1)
	o.mu.Lock()
	o.followers[r] = struct{}{}
	o.mu.Unlock()
	return r
}

// Close releases the reader: the exec's output no longer waits for it, and
// chunks kept beyond the rings' limits for it alone are dropped.
func (r *OutputReader) Close() {
	o := r.o
	o.mu.Lock()
	if o.live == r {
		if r.eof {
			o.live, o.liveState = nil, liveDone
		} else {
			o.loseLiveLocked() // from what it has not sent
		}
	}
	delete(o.followers, r)
	r.releaseHeld()
	for i := range o.rings {
		o.evictLocked(i, 0)
	}
	o.broadcastLocked()
	o.mu.Unlock()
}

// Next returns the next output event, waiting for one if necessary; calling
// it again (or NextBatch) says the caller has sent the previous one. It
// returns io.EOF once every chunk has been delivered and both streams are
// closed, and ctx's error if ctx ends first. A chunk's Data is valid until
// the next call of Next, NextBatch or Close (its buffer is reused then):
// copy what must outlive that.
func (r *OutputReader) Next(ctx context.Context) (OutputEvent, error) {
	evs, err := r.next1(ctx, r.one[:0], 0)
	if err != nil {
		return OutputEvent{}, err
	}
	return evs[0], nil
}

// NextBatch appends to evs every event that is ready, in order, waiting
// for the first if none is; it stops adding chunks once they hold maxBytes
// or more. Calling it again (or Next) says the caller has sent everything
// it returned before, so flow control and [runbox.SpillUnsent] mean what
// they mean for Next: the store keeps, and waits for, a batch until the
// caller comes back. It returns io.EOF (and no events) as Next does. The
// chunks' Data are valid until the next call of Next, NextBatch or Close.
//
// A stream that sends the batch with one write wakes once per batch, not
// once per chunk: while it writes, the pipe's reader keeps filling the ring.
func (r *OutputReader) NextBatch(ctx context.Context, evs []OutputEvent, maxBytes int) ([]OutputEvent, error) {
	return r.next1(ctx, evs, maxBytes)
}

// next1 marks what the caller had as sent, waits for an event, and
// appends it and (while their chunks stay under maxBytes) the events
// ready after it.
func (r *OutputReader) next1(ctx context.Context, evs []OutputEvent, maxBytes int) ([]OutputEvent, error) {
	r.o.mu.Lock()
	r.releaseHeld()
	if r.sent != r.next {
		// The caller came back: it has sent what it was given before.
		r.sent = r.next
		if r.o.producerWait || r.o.settling {
			r.o.broadcastLocked()
		}
	}
	r.o.mu.Unlock()
	for {
		r.o.mu.Lock()
		ev, ok := r.nextLocked()
		if ok {
			evs = append(evs, ev)
			size := chunkLen(ev)
			for size < maxBytes {
				if ev, ok = r.nextLocked(); !ok {
					break
				}
				evs = append(evs, ev)
				size += chunkLen(ev)
			}
			r.o.mu.Unlock()
			return evs, nil
		}
		if r.o.open == 0 {
			r.eof = true
			r.o.mu.Unlock()
			return evs, io.EOF
		}
		changed := r.o.changed
		r.o.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return evs, ctx.Err()
		}
	}
}

// chunkLen is the size of ev's chunk (0 for a gap).
func chunkLen(ev OutputEvent) int {
	if ev.Chunk == nil {
		return 0
	}
	return len(ev.Chunk.Data)
}

// releaseHeld lets go of the buffers of the chunks returned last.
func (r *OutputReader) releaseHeld() {
	for i, b := range r.held {
		b.release()
		r.held[i] = nil
	}
	r.held = r.held[:0]
}

func (r *OutputReader) nextLocked() (OutputEvent, bool) {
	if r.next > r.o.seq {
		return OutputEvent{}, false
	}
	// The earliest retained chunk at or after the cursor, across both rings.
	best, bestStream := ringChunk{}, -1
	for i := range r.o.rings {
		if j := r.o.rings[i].firstFrom(r.next); j >= 0 {
			c := r.o.rings[i].chunks[j]
			if bestStream < 0 || c.seq < best.seq {
				best, bestStream = c, i
			}
		}
	}
	// Every sequence number belongs to a chunk of one of the rings, so any
	// number between the cursor and the earliest retained chunk was evicted.
	if bestStream < 0 || best.seq > r.next {
		to := r.o.seq + 1
		if bestStream >= 0 {
			to = best.seq
		}
		gap := &runbox.OutputGap{FromSeq: r.next, ToSeq: to}
		for i := range r.o.rings {
			rg := &r.o.rings[i]
			resume := rg.total // offset of the first byte this reader will see next
			if j := rg.firstFrom(to); j >= 0 {
				resume = rg.chunks[j].off
			}
			if r.off[i] >= 0 && resume > r.off[i] {
				gap.Bytes += resume - r.off[i]
			}
			r.off[i] = resume
		}
		r.next = to
		return OutputEvent{Gap: gap}, true
	}
	r.next = best.seq + 1
	r.off[bestStream] = best.off + int64(len(best.data))
	if best.buf != nil {
		best.buf.retain()
		r.held = append(r.held, best.buf)
	}
	return OutputEvent{Chunk: &runbox.Chunk{
		Stream: runbox.Stream(bestStream + 1), Seq: best.seq, Data: best.data,
	}}, true
}
