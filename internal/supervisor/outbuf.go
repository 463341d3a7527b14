package supervisor

import (
	"sync"
	"sync/atomic"
)

// outBuf is a read buffer that, once read into, is shared by everything
// that keeps or sends the chunk it holds: the replay ring, each reader that
// returned it and has not yet come back for its next event, the stream's
// spill writer, and a SpillUnsent store's list of unsent chunks. Each of
// them holds a reference; the last to let go returns the buffer to outBufs.
// So a stream read at full speed cycles through a few buffers instead of
// allocating a fresh one per chunk, which the runtime zeroes, the kernel
// faults in page by page, and the garbage collector scans for
// (docs/performance.md, "Output: runboxd's per-chunk cost").
type outBuf struct {
	data []byte // readChunkSize bytes
	refs atomic.Int32
}

var outBufs = sync.Pool{New: func() any { return &outBuf{data: make([]byte, readChunkSize)} }}

// poisonReleasedOutBufs makes release overwrite a buffer that goes back to
// the pool, so that a holder that let go too early reads garbage a test
// notices (and the race detector sees the write). Tests set it.
var poisonReleasedOutBufs atomic.Bool

// getOutBuf returns a buffer with one reference: the caller's.
func getOutBuf() *outBuf {
	b := outBufs.Get().(*outBuf)
	b.refs.Store(1)
	return b
}

// retain adds a reference to b (nil: a chunk with bytes of its own).
func (b *outBuf) retain() {
	if b != nil {
		b.refs.Add(1)
	}
}

// release drops a reference to b; the last one returns it to the pool.
func (b *outBuf) release() {
	if b == nil {
		return
	}
	switch n := b.refs.Add(-1); {
	case n == 0:
		if poisonReleasedOutBufs.Load() {
			for i := range b.data {
				b.data[i] = 0xEE
			}
		}
		outBufs.Put(b)
	case n < 0:
		panic("supervisor: output buffer released more often than retained")
	}
}

// chunkData is a chunk's bytes and the pooled buffer holding them (nil when
// the bytes are a slice of their own, left to the garbage collector). Whoever
// holds a chunkData holds one reference to buf.
type chunkData struct {
	data []byte
	buf  *outBuf
}

// releaseAll releases every chunk of cs.
func releaseAll(cs []chunkData) {
	for _, c := range cs {
		c.buf.release()
	}
}
