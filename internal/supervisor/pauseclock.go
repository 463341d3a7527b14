package supervisor

import (
	"sync"
	"sync/atomic"
	"time"
)

// pauseClock is the supervisor's active clock: time since it started less
// the time the sandbox spent paused. Exec deadlines and idle timeouts are
// measured on it, so a pause stops them and a resume lets them run on with
// exactly the time they had left. Reading it takes no lock (every output
// chunk of every exec reads it); set replaces its state whole.
type pauseClock struct {
	origin time.Time // when the clock started (monotonic)
	cur    atomic.Pointer[clockState]
	mu     sync.Mutex // serialises set
}

// clockState is one period of the clock, running or paused; never
// changed once published.
type clockState struct {
	paused  bool          // the sandbox is paused now
	since   time.Time     // when the current pause began
	total   time.Duration // the length of every finished pause
	changed chan struct{} // closed when the next state replaces this one
}

func newPauseClock() *pauseClock {
	c := &pauseClock{origin: time.Now()}
	c.cur.Store(&clockState{changed: make(chan struct{})})
	return c
}

// now is the active time elapsed since the clock started; it does not
// advance while paused.
func (c *pauseClock) now() time.Duration {
	st, t := c.cur.Load(), time.Now()
	d := t.Sub(c.origin) - st.total
	if st.paused {
		d -= t.Sub(st.since)
	}
	return d
}

// state reports whether the clock is paused, and a channel closed at its
// next change.
func (c *pauseClock) state() (paused bool, changed <-chan struct{}) {
	st := c.cur.Load()
	return st.paused, st.changed
}

// set pauses or resumes the clock; it reports whether that changed it.
func (c *pauseClock) set(paused bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.cur.Load()
	if old.paused == paused {
		return false
	}
	next := &clockState{paused: paused, since: old.since, total: old.total, changed: make(chan struct{})}
	now := time.Now()
	if paused {
		next.since = now
	} else {
		next.total += now.Sub(old.since)
	}
	c.cur.Store(next)
	close(old.changed)
	return true
}
