package server

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runbox/runbox"
)

// cleanupQueue holds the cleanups that failed (a workspace that could not
// be removed, a provider sandbox that could not be): each is logged and
// counted once it fails, and the reaper retries it on every pass until it
// succeeds, so a failed cleanup never leaks disk silently. The zero value
// is usable.
type cleanupQueue struct {
	once     sync.Once
	failures *prometheus.CounterVec

	mu      sync.Mutex
	pending map[string]func(context.Context) error // by what it removes
}

// metric is the counter of failed cleanups, by what (workspace, sandbox).
func (q *cleanupQueue) metric() *prometheus.CounterVec {
	q.once.Do(func() {
		q.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runbox_cleanup_failures_total",
			Help: "Cleanups that failed (workspace, sandbox), each retried by the reaper until it succeeds; every retry that fails counts again.",
		}, []string{"what"})
	})
	return q.failures
}

// pendingCount is how many failed cleanups wait for the reaper.
func (q *cleanupQueue) pendingCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// removeWorkspace removes a sandbox's workspace; a failure is logged,
// counted and left to the reaper.
func (s *Server) removeWorkspace(dir string) {
	if dir == "" {
		return
	}
	s.cleanup(context.Background(), "workspace", "workspace "+dir, func(context.Context) error { return os.RemoveAll(dir) })
}

// removeProviderSandbox removes the remains of a provider sandbox (force);
// a failure is logged, counted and left to the reaper.
func (s *Server) removeProviderSandbox(ctx context.Context, p runbox.Provider, sb runbox.Sandbox) {
	s.cleanup(ctx, "sandbox", "sandbox "+sb.ID, func(ctx context.Context) error {
		err := p.Remove(ctx, sb, true)
		if errors.Is(err, runbox.ErrSandboxNotFound) {
			return nil
		}
		return err
	})
}

// cleanup runs do, and on failure logs it, counts it under what and queues
// it (by key) for the reaper.
func (s *Server) cleanup(ctx context.Context, what, key string, do func(context.Context) error) {
	err := do(ctx)
	if err == nil {
		return
	}
	s.log.Error("cleanup failed; the reaper will retry", "what", key, "err", err)
	s.cleanups.metric().WithLabelValues(what).Inc()
	q := &s.cleanups
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = make(map[string]func(context.Context) error)
	}
	q.pending[key] = func(ctx context.Context) error {
		if err := do(ctx); err != nil {
			s.cleanups.metric().WithLabelValues(what).Inc()
			return err
		}
		return nil
	}
}

// retryCleanups retries every failed cleanup once (the reaper's pass).
func (s *Server) retryCleanups(ctx context.Context) {
	q := &s.cleanups
	q.mu.Lock()
	pending := make(map[string]func(context.Context) error, len(q.pending))
	for k, f := range q.pending {
		pending[k] = f
	}
	q.mu.Unlock()
	for key, retry := range pending {
		if ctx.Err() != nil {
			return
		}
		if err := retry(ctx); err != nil {
			s.log.Warn("cleanup still failing", "what", key, "err", err)
			continue
		}
		s.log.Info("cleanup done on retry", "what", key)
		q.mu.Lock()
		delete(q.pending, key)
		q.mu.Unlock()
	}
}
