package supervisor

import (
	"bytes"
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
// byte. data is never modified while the chunk is held (see outBuf), so
// readers share it; the ring holds one reference to buf.
type ringChunk struct {
	seq  uint64
	off  int64
	data []byte
	buf  *outBuf
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

// push stores c as chunk seq; the ring takes over c's reference.
func (r *ring) push(seq uint64, c chunkData) {
	r.chunks = append(r.chunks, ringChunk{seq: seq, off: r.total, data: c.data, buf: c.buf})
	r.bytes += len(c.data)
	r.total += int64(len(c.data))
}

func (r *ring) evictOldest() {
	r.bytes -= len(r.chunks[0].data)
	r.chunks[0].buf.release()
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
	spill    runbox.SpillMode
	spilling [2]bool
	// spillFrom is each stream's offset where its spill starts, once
	// decided (-1 before).
	spillFrom [2]int64
	// unsent holds, for SpillUnsent, the chunks from spillFrom on that the
	// stream's spill must start with: they were in the ring when the live
	// stream missed them. The producer (or the exec's end) writes them.
	unsent [2][]chunkData
	// live is the reader of the Run stream a SpillUnsent exec spills for;
	// liveState says where it is.
	live      *OutputReader
	liveState liveState
	// settling is set while the exec's end waits for the live stream to
	// send what it has not yet: readers must broadcast their progress.
	settling bool
	mu       sync.Mutex
	seq      uint64 // last sequence number assigned
	rings    [2]ring
	results  [2]headTail
	open     int           // streams not yet at EOF
	changed  chan struct{} // closed and replaced on every change
	// lastOutput is when the last chunk arrived, on clock (see activeNow).
	lastOutput time.Duration
	// clock is the supervisor's pause clock; nil (tests) means wall time
	// since born.
	clock *pauseClock
	born  time.Time
	// followers are the flow-controlled readers: the exec's own Run
	// stream, never an observer (attach, Output). The stream's reader
	// waits (and so the command's writes block, as on a terminal) rather
	// than evict a chunk a follower has not read yet. A follower that goes
	// away releases it. Any other reader that falls behind the ring loses
	// its place and sees a Gap: an observer never stalls the command.
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
		open: 2, changed: make(chan struct{}), born: time.Now(), spill: spill,
		followers: make(map[*OutputReader]struct{}), spillFrom: [2]int64{-1, -1},
	}
	for i := range o.rings {
		o.rings[i].limit = ringBytes
		o.results[i] = headTail{headLimit: head, tailLimit: tail}
	}
	return o
}

func streamIndex(s runbox.Stream) int { return int(s) - 1 }

// append stores a copy of data as the next chunk of stream. When this chunk
// makes the stream start spilling, it returns startSpill with what the spill
// file must hold before this chunk (see appendChunk).
func (o *outputStore) append(s runbox.Stream, data []byte) (startSpill bool, prior [][]byte) {
	start, chunks := o.appendChunk(s, chunkData{data: bytes.Clone(data)})
	for _, c := range chunks {
		prior = append(prior, bytes.Clone(c.data))
		c.buf.release()
	}
	return start, prior
}

// appendChunk stores c as the next chunk of stream s: the store takes over
// the reference c holds, and nothing may modify c.data while the chunk is
// held. When the stream starts spilling with this chunk, prior is what the
// spill file holds before it: everything the stream produced (SpillAuto:
// the head and tail still hold it), or, for SpillUnsent, the chunks from
// the first one the live stream missed. The caller holds a reference to
// each chunk of prior and releases it once written.
func (o *outputStore) appendChunk(s runbox.Stream, c chunkData) (startSpill bool, prior []chunkData) {
	buf := c.data
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
	o.evictLocked(i, len(buf))
	if !o.spilling[i] {
		startSpill, prior = o.startSpillLocked(i, len(buf))
	}
	o.rings[i].push(o.seq, c)
	o.results[i].write(buf)
	o.lastOutput = o.activeNow()
	o.broadcastLocked()
	return startSpill, prior
}

// startSpillLocked decides whether stream i starts spilling with its next
// chunk, of n bytes, and returns what the spill holds before that chunk.
func (o *outputStore) startSpillLocked(i, n int) (bool, []chunkData) {
	mode := o.spill
	if mode == runbox.SpillUnsent && o.liveState == liveNone {
		mode = runbox.SpillAuto // no live stream: every byte is unsent
	}
	switch mode {
	case runbox.SpillAlways:
		o.spilling[i], o.spillFrom[i] = true, 0
		return true, nil
	case runbox.SpillAuto:
		h := &o.results[i]
		if h.total+int64(n) <= int64(h.headLimit+h.tailLimit) {
			return false, nil
		}
		o.spilling[i], o.spillFrom[i] = true, 0
		if all, _ := h.result(); len(all) > 0 {
			return true, []chunkData{{data: all}}
		}
		return true, nil
	case runbox.SpillUnsent:
		if o.spillFrom[i] < 0 {
			return false, nil
		}
		prior := o.unsent[i]
		o.spilling[i], o.unsent[i] = true, nil
		return true, prior
	}
	return false, nil
}

// liveState is where a SpillUnsent exec's live stream is.
type liveState int

const (
	liveNone      liveState = iota // no live stream: SpillUnsent is SpillAuto
	liveFollowing                  // it follows the output
	liveDone                       // it sent every byte
	liveLost                       // it went away, or the exec ended first
)

// setLive makes r the live stream a SpillUnsent store spills for. It is
// called before any output is stored.
func (o *outputStore) setLive(r *OutputReader) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.spill == runbox.SpillUnsent {
		o.live, o.liveState = r, liveFollowing
	}
}

// missedLocked records that the live stream misses stream i from the chunk
// at index j of its ring on (j == len: from the next chunk): the stream
// spills from there.
func (o *outputStore) missedLocked(i, j int) {
	if o.spilling[i] || o.spillFrom[i] >= 0 {
		return
	}
	r := &o.rings[i]
	if j >= len(r.chunks) {
		o.spillFrom[i] = r.total
		return
	}
	o.spillFrom[i] = r.chunks[j].off
	for _, c := range r.chunks[j:] {
		c.buf.retain()
		o.unsent[i] = append(o.unsent[i], chunkData{data: c.data, buf: c.buf})
	}
}

// loseLiveLocked records that the live stream will send nothing more
// after what it has sent: every stream spills from its first unsent byte.
func (o *outputStore) loseLiveLocked() {
	if o.liveState != liveFollowing {
		return
	}
	for i := range o.rings {
		j := o.rings[i].firstFrom(o.live.sent)
		if j < 0 {
			j = len(o.rings[i].chunks)
		}
		o.missedLocked(i, j)
	}
	o.live, o.liveState = nil, liveLost
}

// unsentAtEnd is called once every stream's producer is done. It waits, up
// to wait, for the live stream to send the rest of the output; what it has
// not sent by then is spilled. It returns, per stream, the chunks a spill
// that has not started yet must be written with (nil: none); the caller
// releases each once written.
func (o *outputStore) unsentAtEnd(wait time.Duration) [2][]chunkData {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.liveState == liveFollowing && o.live.sent <= o.seq {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		o.settling = true
	waiting:
		for o.liveState == liveFollowing && o.live.sent <= o.seq {
			changed := o.changed
			o.mu.Unlock()
			select {
			case <-changed:
				o.mu.Lock()
			case <-timer.C:
				o.mu.Lock()
				break waiting
			}
		}
		o.settling = false
	}
	if o.liveState == liveFollowing && o.live.sent <= o.seq {
		o.loseLiveLocked()
	}
	var out [2][]chunkData
	for i := range o.unsent {
		if !o.spilling[i] && len(o.unsent[i]) > 0 {
			out[i] = o.unsent[i]
			o.spilling[i], o.unsent[i] = true, nil
		}
	}
	return out
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
// not sent yet (beyond every chunk when there is no follower): a chunk a
// follower's caller is sending is still kept, in case the send fails.
func (o *outputStore) firstUnreadLocked() uint64 {
	unread := o.seq + 1
	for f := range o.followers {
		unread = min(unread, f.sent)
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
		if o.liveState == liveFollowing && r.chunks[0].seq >= o.live.sent {
			o.missedLocked(i, 0) // the live stream will never send it
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

// idleSince is when the last output arrived (or the store was made), on
// the active clock (activeNow).
func (o *outputStore) idleSince() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastOutput
}

// activeNow reads the active clock: the pause clock's time, which stops
// while the sandbox is paused, or the wall time since the store was made.
func (o *outputStore) activeNow() time.Duration {
	if o.clock != nil {
		return o.clock.now()
	}
	return time.Since(o.born)
}

// fill copies the head/tail buffers and counters into r. It is called
// once, when every stream has ended: the store then lets its own head and
// tail buffers go (the Result holds them), so a retained exec keeps one
// copy, not two.
func (o *outputStore) fill(r *runbox.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r.Stdout, r.StdoutDropped = o.results[0].result()
	r.Stderr, r.StderrDropped = o.results[1].result()
	for i := range o.results {
		o.results[i].head, o.results[i].tail, o.results[i].tailStart = nil, nil, 0
	}
	r.StdoutBytes, r.StderrBytes = o.results[0].total, o.results[1].total
	r.StdoutSpillOffset, r.StderrSpillOffset = max(o.spillFrom[0], 0), max(o.spillFrom[1], 0)
}
