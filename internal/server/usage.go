package server

import (
	"context"
	"time"

	"github.com/runbox/runbox/internal/registry"
)

// usage is what the server knows of a sandbox's use: calls in flight (an
// attached client counts until its stream ends) and when it was last used.
type usage struct {
	active    int
	lastUsed  time.Time
	persisted time.Time // when lastUsed was last written to the registry
	removing  bool
}

// touchEvery bounds how often a sandbox's last use is written to the
// registry (the reaper reads the in-memory value; the registry's is for
// the next server run).
const touchEvery = time.Second

// usageOf returns id's usage record; s.mu is held.
func (s *Server) usageOf(id string) *usage {
	u := s.usage[id]
	if u == nil {
		u = &usage{}
		s.usage[id] = u
	}
	return u
}

// acquire marks sandbox id in use until release is called. ok is false
// while the sandbox is being removed.
func (s *Server) acquire(id string) (release func(), ok bool) { return s.acquireFor(id, true) }

// acquireFor is acquire; without use, the call keeps the sandbox from
// being reaped while it runs but is not a use: it leaves the sandbox's
// idle clock where it was (a pause or a resume, which stop and restart
// that clock).
func (s *Server) acquireFor(id string, use bool) (release func(), ok bool) {
	s.mu.Lock()
	u := s.usageOf(id)
	if u.removing {
		s.mu.Unlock()
		return nil, false
	}
	u.active++
	if use {
		u.lastUsed = s.now()
	}
	s.mu.Unlock()
	return func() {
		now := s.now()
		s.mu.Lock()
		u.active--
		if !use {
			s.mu.Unlock()
			return
		}
		u.lastUsed = now
		persist := now.Sub(u.persisted) >= touchEvery
		if persist {
			u.persisted = now
		}
		s.mu.Unlock()
		if persist {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.store.Touch(ctx, id, now); err != nil {
				s.log.Error("touch sandbox", "sandbox", id, "err", err)
			}
			cancel()
		}
	}, true
}

// beginRemove marks id as being removed, so no new call reaches it. With
// onlyIdle it refuses (false) when a call is in flight or an exec runs.
func (s *Server) beginRemove(id string, onlyIdle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usageOf(id)
	if u.removing {
		return false
	}
	if onlyIdle && (u.active > 0 || s.runningIn(id) > 0) {
		return false
	}
	u.removing = true
	return true
}

// endRemove forgets id's usage.
func (s *Server) endRemove(id string) {
	s.mu.Lock()
	delete(s.usage, id)
	s.mu.Unlock()
}

// idleSince returns when sandbox id was last in use, and whether it is
// idle now (no call in flight, no exec running); s.mu is not held.
func (s *Server) idleSince(id string, recorded time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usage[id]
	last := recorded
	if u != nil {
		if u.active > 0 || u.removing {
			return time.Time{}, false
		}
		if u.lastUsed.After(last) {
			last = u.lastUsed
		}
	}
	if s.runningIn(id) > 0 {
		return time.Time{}, false
	}
	return last, true
}

// resumeIdleClock returns rec's last use once it is resumed at now: moved
// forward by the time it was paused, so that a sandbox paused with 9 of
// its 10 idle minutes used has 1 left after resume. A use while paused
// (a snapshot, a refused exec) restarts the clock at the resume. A record
// paused at an unknown time (see registry.Sandbox.PausedAt) restarts it
// too. It records the result as the sandbox's last use in memory; the
// caller writes it to the registry.
func (s *Server) resumeIdleClock(rec registry.Sandbox, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usageOf(rec.ID)
	last := rec.LastUsed
	if u.lastUsed.After(last) {
		last = u.lastUsed
	}
	resumed := now
	if !rec.PausedAt.IsZero() && last.Before(rec.PausedAt) {
		// The idle time it had used before the pause still counts.
		resumed = now.Add(-rec.PausedAt.Sub(last))
	}
	u.lastUsed = resumed
	return resumed
}
