package daemon

import (
	"context"
	"crypto/rand"
	"sync"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// hold is one Hold stream's hold on the supervisor.
type hold struct {
	once     sync.Once
	release  func() error
	err      error
	released chan struct{} // closed once released
}

// end releases h once; every call returns the release's error.
func (h *hold) end() error {
	h.once.Do(func() {
		h.err = h.release()
		close(h.released)
	})
	return h.err
}

// holdTable is the daemon's open holds by id.
type holdTable struct {
	mu sync.Mutex
	m  map[string]*hold
}

func (t *holdTable) add(h *hold) string {
	id := rand.Text()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*hold{}
	}
	t.m[id] = h
	return id
}

// take removes and returns the hold id, or nil.
func (t *holdTable) take(id string) *hold {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.m[id]
	delete(t.m, id)
	return h
}

// Hold freezes every exec's processes, as Pause does, for as long as the
// stream lasts: it answers one HoldEvent once they are frozen, then keeps
// the hold until ReleaseHold, the client ending the stream, its connection
// dropping (a holder that dies releases it with its socket) or the daemon
// stopping. The user's pause is the supervisor's separate flag, so a
// Resume meanwhile leaves the commands frozen until the last hold ends.
func (s *Server) Hold(ctx context.Context, req *connect.Request[runboxv1.HoldRequest], out *connect.ServerStream[runboxv1.HoldEvent]) error {
	release, err := s.sup.Hold()
	if err != nil {
		return s.rpcError("hold", err)
	}
	h := &hold{release: release, released: make(chan struct{})}
	id := s.holds.add(h)
	defer func() {
		s.holds.take(id)
		if err := h.end(); err != nil {
			s.log.Error("release hold", "reason", req.Msg.GetReason(), "err", err)
		}
	}()
	if err := out.Send(&runboxv1.HoldEvent{Frozen: true, Paused: s.sup.Paused(), Id: id}); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-s.stopping:
	case <-h.released:
	}
	return nil
}

// ReleaseHold ends the hold id and answers once the sandbox is thawed (or
// stays frozen for the user's pause or another hold). held false says the
// hold had ended before: its stream broke or the daemon is stopping.
func (s *Server) ReleaseHold(_ context.Context, req *connect.Request[runboxv1.ReleaseHoldRequest]) (*connect.Response[runboxv1.ReleaseHoldResponse], error) {
	h := s.holds.take(req.Msg.GetId())
	if h == nil {
		return connect.NewResponse(&runboxv1.ReleaseHoldResponse{}), nil
	}
	if err := h.end(); err != nil {
		return nil, s.rpcError("release hold", err)
	}
	return connect.NewResponse(&runboxv1.ReleaseHoldResponse{Held: true}), nil
}
