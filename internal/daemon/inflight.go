package daemon

import (
	"net/http"
	"sync"
)

// inFlight counts the RPC handlers in progress, so that a stopping server
// knows when every answer has been handed to its connection.
type inFlight struct {
	mu      sync.Mutex
	n       int
	waiters []chan struct{}
}

// wrap counts h's calls while they run.
func (f *inFlight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		defer f.done()
		h.ServeHTTP(w, r)
	})
}

func (f *inFlight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		for _, ch := range f.waiters {
			close(ch)
		}
		f.waiters = nil
	}
}

// idle returns a channel closed once no handler is running (at once if none
// is).
func (f *inFlight) idle() <-chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		close(ch)
	} else {
		f.waiters = append(f.waiters, ch)
	}
	return ch
}
