package daemon

import (
	"runtime/debug"
	"sync"
	"time"
)

// Returning memory after large requests. A request of a few MiB (a long
// command, a large stdin, or an oversize one refused) leaves the daemon's
// heap grown, and Go gives memory back to the OS only after a later
// garbage collection, which an idle daemon may not run for minutes: the
// sandbox would carry the peak as resident memory. So after a large
// request the daemon collects and returns free memory itself.
const (
	// largeRequestBytes is the request size from which memory is
	// returned after it.
	largeRequestBytes = 1 << 20
	// releaseDelay coalesces a burst of large requests into one release,
	// and lets the request that scheduled it be done with its message.
	releaseDelay = 100 * time.Millisecond
)

// memoryReleaser runs debug.FreeOSMemory at most once per releaseDelay.
type memoryReleaser struct {
	mu      sync.Mutex
	pending bool
}

// releaser serves every Server of the process: they share one heap.
var releaser memoryReleaser

// afterLarge schedules a release when a request of size bytes is large.
func (m *memoryReleaser) afterLarge(size int) {
	if size < largeRequestBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending {
		return
	}
	m.pending = true
	time.AfterFunc(releaseDelay, func() {
		m.mu.Lock()
		m.pending = false
		m.mu.Unlock()
		// Twice: connect keeps message buffers (up to 8 MiB) in a
		// sync.Pool, which lets go of them over two collections.
		debug.FreeOSMemory()
		debug.FreeOSMemory()
	})
}
