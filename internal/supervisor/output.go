package supervisor

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/runbox/runbox"
)

// OutputEvent is one step of an exec's output as an [OutputReader] sees it:
// exactly one of Chunk and Gap is set.
type OutputEvent struct {
	Chunk *runbox.Chunk
	Gap   *runbox.OutputGap
}

// ringChunk is a chunk kept for replay; off is the stream offset of its first
// byte. data is never modified once stored, so readers share it.
type ringChunk struct {
	seq  uint64
	off  int64
	data []byte
}

// ring keeps the most recent chunks of one stream, at most limit bytes (a
// single chunk larger than limit is kept alone). The owning store decides
// what to evict; the ring only stores.
type ring struct {
	limit  int
	bytes  int
	total  int64 // bytes ever appended: the offset of the next byte
	chunks []ringChunk
}

func (r *ring) push(seq uint64, data []byte) {
	r.chunks = append(r.chunks, ringChunk{seq: seq, off: r.total, data: data})
	r.bytes += len(data)
	r.total += int64(len(data))
}

func (r *ring) evictOldest() {
	r.bytes -= len(r.chunks[0].data)
	r.chunks[0] = ringChunk{}
	r.chunks = r.chunks[1:]
}

// firstFrom returns the index of the first chunk with seq >= seq, or -1.
func (r *ring) firstFrom(seq uint64) int {
	lo, hi := 0, len(r.chunks)
	for lo < hi {
		mid := (lo + hi) / 2
		if r.chunks[mid].seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(r.chunks) {
		return -1
	}
	return lo
}

// headTail keeps the first and last bytes of a stream and counts the rest.
type headTail struct {
	headLimit, tailLimit int
	head                 []byte
	tail                 []byte // circular once full
	tailStart            int    // index of the oldest tail byte when full
	total                int64
}

func (h *headTail) write(p []byte) {
	h.total += int64(len(p))
	if n := h.headLimit - len(h.head); n > 0 {
		if n > len(p) {
			n = len(p)
		}
		h.head = append(h.head, p[:n]...)
		p = p[n:]
	}
	if h.tailLimit == 0 || len(p) == 0 {
		return
	}
	if len(p) >= h.tailLimit {
		h.tail = append(h.tail[:0], p[len(p)-h.tailLimit:]...)
		h.tailStart = 0
		return
	}
	if room := h.tailLimit - len(h.tail); room > 0 {
		n := min(room, len(p))
		h.tail = append(h.tail, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 { // tail is full: overwrite the oldest bytes
		n := copy(h.tail[h.tailStart:], p)
		p = p[n:]
		h.tailStart = (h.tailStart + n) % h.tailLimit
	}
}

// result returns head followed by tail, and the count of bytes between them.
func (h *headTail) result() ([]byte, int64) {
	out := make([]byte, 0, len(h.head)+len(h.tail))
	out = append(out, h.head...)
	out = append(out, h.tail[h.tailStart:]...)
	out = append(out, h.tail[:h.tailStart]...)
	return out, h.total - int64(len(out))
}

// outputStore is an exec's output: the replay rings, the result buffers, and
// a broadcast that wakes readers when anything changes.
type outputStore struct {
	spill      runbox.SpillMode
	spilling   [2]bool
	mu         sync.Mutex
	seq        uint64 // last sequence number assigned
	rings      [2]ring
	results    [2]headTail
	open       int           // streams not yet at EOF
	changed    chan struct{} // closed and replaced on every change
	lastOutput time.Time
	// followers are the readers a connected client is consuming live. The
	// stream's reader waits (and so the command's writes block, as on a
	// terminal) rather than evict a chunk a follower has not read yet. A
	// follower that goes away releases it.
	followers    map[*OutputReader]struct{}
	producerWait bool // a producer waits for followers: readers must broadcast
	// draining is set once the leader has exited: the drain that follows is
	// bounded in time, so the producer never waits again. Instead each ring
	// keeps chunks a follower has not read up to drainSlackBytes beyond its
	// limit, so a slow client still gets everything the command wrote.
	draining bool
}

func newOutputStore(ringBytes, head, tail int, spill runbox.SpillMode) *outputStore {
	o := &outputStore{
		open: 2, changed: make(chan struct{}), lastOutput: time.Now(), spill: spill,
		followers: make(map[*OutputReader]struct{}),
	}
	for i := range o.rings {
		o.rings[i].limit = ringBytes
		o.results[i] = headTail{headLimit: head, tailLimit: tail}
	}
	return o
}

func streamIndex(s runbox.Stream) int { return int(s) - 1 }

// append stores a copy of data as the next chunk of stream. When this chunk
// makes the stream start spilling, it returns startSpill with everything the
// stream produced before it (all of which the head and tail still hold).
func (o *outputStore) append(s runbox.Stream, data []byte) (startSpill bool, prior []byte) {
	buf := make([]byte, len(data))
	copy(buf, data)
	return o.appendOwned(s, buf)
}

// appendOwned is append for a buffer the caller hands over: it is stored as
// it is, and the caller must not touch it again.
func (o *outputStore) appendOwned(s runbox.Stream, buf []byte) (startSpill bool, prior []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := streamIndex(s)
	for o.mustWaitLocked(i, len(buf)) {
		o.producerWait = true
		changed := o.changed
		o.mu.Unlock()
		<-changed
		o.mu.Lock()
	}
	o.producerWait = false
	o.seq++
	if !o.spilling[i] {
		h := &o.results[i]
		switch o.spill {
		case runbox.SpillAlways:
			o.spilling[i], startSpill = true, true
		case runbox.SpillAuto:
			if h.total+int64(len(buf)) > int64(h.headLimit+h.tailLimit) {
				o.spilling[i], startSpill = true, true
				prior, _ = h.result()
			}
		}
	}
	o.evictLocked(i, len(buf))
	o.rings[i].push(o.seq, buf)
	o.results[i].write(buf)
	o.lastOutput = time.Now()
	o.broadcastLocked()
	return startSpill, prior
}

// mustWaitLocked reports whether adding n bytes to ring i would evict a
// chunk some follower has not read yet.
func (o *outputStore) mustWaitLocked(i, n int) bool {
	if o.draining || len(o.followers) == 0 {
		return false
	}
	unread := o.firstUnreadLocked()
	r := &o.rings[i]
	bytes := r.bytes
	for _, c := range r.chunks {
		if bytes+n <= r.limit {
			return false
		}
		if c.seq >= unread {
			return true
		}
		bytes -= len(c.data)
	}
	return false
}

// firstUnreadLocked returns the lowest sequence number some follower has
// not read yet (beyond every chunk when there is no follower).
func (o *outputStore) firstUnreadLocked() uint64 {
	unread := o.seq + 1
	for f := range o.followers {
		unread = min(unread, f.next)
	}
	return unread
}

// evictLocked makes room in ring i for n more bytes: it drops the oldest
// chunks beyond the ring's limit, except that while draining it keeps
// chunks a follower has not read, up to drainSlackBytes beyond the limit.
func (o *outputStore) evictLocked(i, n int) {
	r := &o.rings[i]
	slack := 0
	if o.draining {
		slack = drainSlackBytes
	}
	unread := o.firstUnreadLocked()
	for len(r.chunks) > 0 && r.bytes+n > r.limit {
		if r.chunks[0].seq >= unread && r.bytes+n <= r.limit+slack {
			return
		}
		r.evictOldest()
	}
}

// startDrain records that the leader has exited: from now on the producer
// never waits for followers (see draining).
func (o *outputStore) startDrain() {
	o.mu.Lock()
	o.draining = true
	o.broadcastLocked()
	o.mu.Unlock()
}

// closeStream records that stream s reached EOF (or stopped being read).
func (o *outputStore) closeStream() {
	o.mu.Lock()
	o.open--
	o.broadcastLocked()
	o.mu.Unlock()
}

func (o *outputStore) broadcastLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *outputStore) idleSince() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastOutput
}

// fill copies the head/tail buffers and counters into r.
func (o *outputStore) fill(r *runbox.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r.Stdout, r.StdoutDropped = o.results[0].result()
	r.Stderr, r.StderrDropped = o.results[1].result()
	r.StdoutBytes, r.StderrBytes = o.results[0].total, o.results[1].total
}

// OutputReader follows an exec's output from a sequence number. Each reader
// has its own cursor. While a reader is open, the exec's output waits for it
// rather than drop what it has not read (a terminal's flow control); a
// reader that started behind the ring sees a Gap. Close it when done.
type OutputReader struct {
	o    *outputStore
	next uint64
	off  [2]int64 // stream offset this reader has reached, -1 when unknown
}

func (o *outputStore) reader(from uint64) *OutputReader {
	if from == 0 {
		from = 1
	}
	r := &OutputReader{o: o, next: from}
	if from > 1 {
		r.off = [2]int64{-1, -1}
	}
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
	delete(o.followers, r)
	for i := range o.rings {
		o.evictLocked(i, 0)
	}
	o.broadcastLocked()
	o.mu.Unlock()
}

// Next returns the next output event, waiting for one if necessary. It
// returns io.EOF once every chunk has been delivered and both streams are
// closed, and ctx's error if ctx ends first.
func (r *OutputReader) Next(ctx context.Context) (OutputEvent, error) {
	for {
		r.o.mu.Lock()
		ev, ok := r.nextLocked()
		if ok {
			if r.o.producerWait {
				r.o.broadcastLocked()
			}
			r.o.mu.Unlock()
			return ev, nil
		}
		if r.o.open == 0 {
			r.o.mu.Unlock()
			return OutputEvent{}, io.EOF
		}
		changed := r.o.changed
		r.o.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return OutputEvent{}, ctx.Err()
		}
	}
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
	return OutputEvent{Chunk: &runbox.Chunk{
		Stream: runbox.Stream(bestStream + 1), Seq: best.seq, Data: best.data,
	}}, true
}
