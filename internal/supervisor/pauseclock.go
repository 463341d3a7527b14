package supervisor

import (
	"sync"
	"time"
)

// pauseClock is the supervisor's active clock: time since it started less
// the time the sandbox spent paused. Exec deadlines and idle timeouts are
// measured on it, so a pause stops them and a resume lets them run on with
// exactly the time they had left.
type pauseClock struct {
	mu      sync.Mutex
	origin  time.Time     // when the clock started (monotonic)
	paused  bool          // the sandbox is paused now
	since   time.Time     // when the current pause began
	total   time.Duration // the length of every finished pause
	changed chan struct{} // closed, and replaced, at every pause and resume
}

func newPauseClock() *pauseClock {
	return &pauseClock{origin: time.Now(), changed: make(chan struct{})}
}

// now is the active time elapsed since the clock started; it does not
// advance while paused.
func (c *pauseClock) now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(time.Now())
}

func (c *pauseClock) nowLocked(t time.Time) time.Duration {
	d := t.Sub(c.origin) - c.total
	if c.paused {
		d -= t.Sub(c.since)
	}
	return d
}

// state reports whether the clock is paused, and a channel closed at its
// next change.
func (c *pauseClock) state() (paused bool, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused, c.changed
}

// set pauses or resumes the clock; it reports whether that changed it.
func (c *pauseClock) set(paused bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused == paused {
		return false
	}
	now := time.Now()
	if paused {
		c.since = now
	} else {
		c.total += now.Sub(c.since)
	}
	c.paused = paused
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}
