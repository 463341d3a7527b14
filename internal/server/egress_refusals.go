package server

import (
	"context"
	"encoding/json"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/registry"
)

// defaultEgressAuditInterval is how often refusals are taken into the
// audit log when Config.EgressAuditInterval is zero: often enough that a
// user looking right after a refused command finds its row, and cheap (a
// file opened per private sandbox).
const defaultEgressAuditInterval = 2 * time.Second

// egressRefusalTaker is a provider whose private sandboxes' host side logs
// its egress refusals (local, docker: egress.RefusalsFile).
type egressRefusalTaker interface {
	TakeEgressRefusals(ctx context.Context, sb runbox.Sandbox) ([]egress.Refused, error)
}

// egressSandbox is a private sandbox as its provider described it, kept so
// that each pass does not ask the provider again.
type egressSandbox struct {
	providerID string
	sb         runbox.Sandbox
}

// egressAuditLoop takes the refusals of every private sandbox into the
// audit log every Config.EgressAuditInterval until the server closes.
func (s *Server) egressAuditLoop() {
	t := time.NewTicker(s.cfg.EgressAuditInterval)
	defer t.Stop()
	for {
		select {
		case <-s.bg.Done():
			return
		case <-t.C:
			s.auditEgressRefusals(s.bg)
		}
	}
}

// auditEgressRefusals makes one pass over every tenant's private
// sandboxes, recording the refusals their host side made since the last.
// The host side bounds them (egress.RefusalLog: coalesced per destination
// and rule, at most a few dozen lines a second and 256 KiB per sandbox),
// so a command refused thousands of times a second adds a few rows a
// second, not thousands.
func (s *Server) auditEgressRefusals(ctx context.Context) {
	recs, err := s.store.ListSandboxes(ctx, "")
	if err != nil {
		s.log.Error("egress audit: list sandboxes", "err", err)
		return
	}
	live := map[string]bool{}
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		p, ok := s.cfg.Providers[rec.Provider]
		taker, takes := p.(egressRefusalTaker)
		if !ok || !takes || rec.State == registry.StateLost || !privateSpec(rec.Spec) {
			continue
		}
		live[rec.ID] = true
		s.mu.Lock()
		c, known := s.egressSbs[rec.ID]
		s.mu.Unlock()
		if !known || c.providerID != rec.ProviderID {
			sb, err := p.Get(ctx, rec.ProviderID)
			if err != nil {
				continue // gone or not answering: the reaper decides
			}
			c = egressSandbox{providerID: rec.ProviderID, sb: sb}
			s.mu.Lock()
			s.egressSbs[rec.ID] = c
			s.mu.Unlock()
		}
		s.recordRefusals(ctx, rec, taker, c.sb)
	}
	s.mu.Lock()
	for id := range s.egressSbs {
		if !live[id] {
			delete(s.egressSbs, id)
		}
	}
	s.mu.Unlock()
}

// privateSpec says a stored spec asks for the private network.
func privateSpec(spec string) bool {
	var sp runboxv1.SandboxSpec
	return protojson.Unmarshal([]byte(spec), &sp) == nil && sp.GetNetwork() == "private"
}

// recordRefusals takes sb's refusals and writes them as rec's tenant's
// audit rows (registry.KindEgressRefused), one per line of the host side's
// log, in one transaction.
func (s *Server) recordRefusals(ctx context.Context, rec registry.Sandbox, taker egressRefusalTaker, sb runbox.Sandbox) {
	rs, err := taker.TakeEgressRefusals(ctx, sb)
	if err != nil {
		s.log.Warn("egress audit: take refusals", "sandbox", rec.ID, "err", err)
	}
	if len(rs) == 0 {
		return
	}
	rows := make([]registry.AuditRow, 0, len(rs))
	for _, r := range rs {
		detail, err := json.Marshal(r)
		if err != nil {
			continue
		}
		rows = append(rows, registry.AuditRow{Tenant: rec.Tenant, Sandbox: rec.ID, Kind: registry.KindEgressRefused,
			Started: r.First, Ended: r.Last, Outcome: registry.OutcomeRefused, Detail: string(detail)})
	}
	if err := s.store.AppendAudit(ctx, rows); err != nil {
		s.log.Error("egress audit: refusals not recorded", "sandbox", rec.ID, "lines", len(rows), "err", err)
	}
}
