package supervisor

import (
	"sync"
	"time"
)

// DisconnectLinger is how long an exec started with CancelOnDisconnect
// waits, after its last follower left without its result, for a follower
// to come back (a client reconnecting after a broken stream) before it is
// cancelled.
const DisconnectLinger = 500 * time.Millisecond

// followers counts the client streams following an exec, for
// CancelOnDisconnect.
type followers struct {
	mu    sync.Mutex
	n     int
	epoch uint64 // bumped whenever a follower arrives
	timer *time.Timer
}

// Follow registers a client stream that follows the exec (a Run or an
// Attach). Call the returned function when the stream ends, with delivered
// set when the stream sent the exited event. When the exec asked for
// CancelOnDisconnect and its last follower leaves without the result, the
// exec is cancelled after DisconnectLinger unless another follows it by
// then.
func (e *Exec) Follow() (leave func(delivered bool)) {
	f := &e.followers
	f.mu.Lock()
	f.n++
	f.epoch++
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	f.mu.Unlock()
	var once sync.Once
	return func(delivered bool) {
		once.Do(func() { e.unfollow(delivered) })
	}
}

func (e *Exec) unfollow(delivered bool) {
	f := &e.followers
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n > 0 || delivered || !e.spec.CancelOnDisconnect || e.finished() {
		return
	}
	epoch := f.epoch
	if f.timer != nil {
		f.timer.Stop()
	}
	f.timer = time.AfterFunc(DisconnectLinger, func() {
		f.mu.Lock()
		abandoned := f.n == 0 && f.epoch == epoch
		f.timer = nil
		f.mu.Unlock()
		if abandoned {
			e.requestStop(stopDisconnect, 0)
		}
	})
}
