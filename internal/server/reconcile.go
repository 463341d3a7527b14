package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/registry"
)

// reconcile compares the registry with what the providers have. A
// registered sandbox its provider no longer has, or whose runboxd does not
// answer, is marked lost. A provider's sandbox the registry does not know
// is reported (logged, counted in runbox_unknown_sandboxes, listed by
// /readyz), never adopted or deleted: it may belong to someone else.
func (s *Server) reconcile(ctx context.Context) error {
	recs, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	known := map[[2]string]registry.Sandbox{}
	for _, r := range recs {
		known[[2]string{r.Provider, r.ProviderID}] = r
	}
	var unknown []runbox.Sandbox
	for name, p := range s.cfg.Providers {
		sbs, err := p.List(ctx)
		if errors.Is(err, runbox.ErrProviderUnavailable) {
			s.log.Warn("provider unavailable: its sandboxes are not checked", "provider", name, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("reconcile: list %s sandboxes: %w", name, err)
		}
		have := map[string]runbox.Sandbox{}
		for _, sb := range sbs {
			have[sb.ID] = sb
			if _, ok := known[[2]string{name, sb.ID}]; !ok {
				unknown = append(unknown, sb)
				s.log.Warn("sandbox not in the registry: reported, not adopted or deleted",
					"provider", name, "provider_id", sb.ID, "name", sb.Name, "alive", sb.Alive)
			}
		}
		for _, r := range recs {
			if r.Provider != name || r.State == registry.StateLost {
				continue
			}
			if sb, ok := have[r.ProviderID]; !ok || !sb.Alive {
				s.checkLost(r) // confirms before marking it lost
			}
		}
	}
	s.mu.Lock()
	s.unknown = unknown
	s.mu.Unlock()
	s.metrics.unknown.Set(float64(len(unknown)))
	return nil
}
