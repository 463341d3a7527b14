package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// providerMatch is one provider's answer to a lookup.
type providerMatch struct {
	p   runbox.Provider
	sb  runbox.Sandbox
	err error
}

// lookupAll asks every provider, at once, for the sandbox named key. Once
// one of them has a sandbox whose id is exactly key, the others are not
// waited for: ids are random and unique, and an exact id wins any ranking
// (see findAcross), so an exec by id does not pay for the slowest
// provider's lookup (a docker engine's, a cluster's).
func (a *app) lookupAll(ctx context.Context, key string) []providerMatch {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ps := a.allProviders()
	out := make([]providerMatch, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() {
			sb, err := p.Get(ctx, key)
			out[i] = providerMatch{p: p, sb: sb, err: err}
			if err == nil && sb.ID == key {
				cancel()
			}
		})
	}
	wg.Wait()
	return out
}

// findAcross looks a sandbox up by id, id prefix or name across every
// provider. An exact id beats an exact name, which beats an id prefix; two
// sandboxes of different providers matching alike are an error naming
// both. A provider that cannot work here (no docker engine) is passed over;
// if no provider has the sandbox, the not-found error says which were.
//
// A key with the form of an id is first read as one by the providers that
// can read a sandbox's record alone (byIDGetter: host, local), in turn: a
// hit ends the lookup with no provider listed, no goroutine started and no
// engine or cluster asked, and its probe's connection is returned for the
// caller's client (nil otherwise; the caller owns it). Any other key is
// first looked up as a name in the name index (names.go), which names the
// one provider to ask; the lookup in every provider writes a missing or
// stale entry back.
func (a *app) findAcross(ctx context.Context, key string) (runbox.Provider, runbox.Sandbox, net.Conn, error) {
	if sandboxkey.ValidID(key) {
		for _, p := range a.allProviders() {
			if g, ok := p.(byIDGetter); ok {
				if sb, conn, err := g.GetByID(ctx, key); err == nil {
					return p, sb, conn, nil
				}
				// Not found, or a failure the full lookup below meets
				// and reports.
			}
		}
	}
	if p, sb, conn, ok := a.findByIndex(ctx, key); ok {
		return p, sb, conn, nil
	}
	p, sb, err := a.rankAcross(ctx, key)
	if err == nil {
		a.repairName(p, sb, key)
	}
	return p, sb, nil, err
}

// byIDGetter is a provider that finds a sandbox by its exact id from its
// record alone, and hands over the connection its probe opened.
type byIDGetter interface {
	GetByID(ctx context.Context, id string) (runbox.Sandbox, net.Conn, error)
}

// rankAcross is findAcross's lookup in every provider at once, ranked.
func (a *app) rankAcross(ctx context.Context, key string) (runbox.Provider, runbox.Sandbox, error) {
	ms := a.lookupAll(ctx, key)
	var found []providerMatch
	var unavailable []string
	var firstErr error
	for _, m := range ms {
		switch {
		case m.err == nil:
			found = append(found, m)
		case errors.Is(m.err, runbox.ErrProviderUnavailable):
			unavailable = append(unavailable, m.p.Name())
		case errors.Is(m.err, runbox.ErrSandboxNotFound) && isPlainNotFound(m.err):
		default: // a failure, or an ambiguous prefix within one provider
			if firstErr == nil {
				firstErr = m.err
			}
		}
	}
	for _, rank := range []func(runbox.Sandbox) bool{
		func(sb runbox.Sandbox) bool { return sb.ID == key },
		func(sb runbox.Sandbox) bool { return sb.Name == key },
		func(runbox.Sandbox) bool { return true }, // an id prefix
	} {
		var best []providerMatch
		for _, m := range found {
			if rank(m.sb) {
				best = append(best, m)
			}
		}
		switch len(best) {
		case 0:
			continue
		case 1:
			return best[0].p, best[0].sb, nil
		}
		return nil, runbox.Sandbox{}, fmt.Errorf("%q is ambiguous: it names %s (use the id)", key, candidates(best))
	}
	if firstErr != nil {
		return nil, runbox.Sandbox{}, firstErr
	}
	if len(unavailable) > 0 {
		return nil, runbox.Sandbox{}, fmt.Errorf("%w (not searched: %s, unavailable here; runbox ls says why)",
			runbox.ErrSandboxNotFound, strings.Join(unavailable, ", "))
	}
	return nil, runbox.Sandbox{}, runbox.ErrSandboxNotFound
}

// candidates lists matches as "local sandbox 1a2b3c4d5e6f (name), ...".
func candidates(ms []providerMatch) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.p.Name() + " sandbox " + m.sb.ID
		if m.sb.Name != "" {
			s[i] += " (" + m.sb.Name + ")"
		}
	}
	return strings.Join(s, " and ")
}

// checkNameFree refuses a name some sandbox of any provider already has
// as its name or id, so that a name always names one sandbox.
func (a *app) checkNameFree(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	var taken []providerMatch
	for _, m := range a.lookupAll(ctx, name) {
		if m.err == nil && (m.sb.Name == name || m.sb.ID == name) {
			taken = append(taken, m)
		}
	}
	if len(taken) > 0 {
		return fmt.Errorf("--name %q is taken: %s has it (names are unique across providers; runbox rm it, or pick another): %w",
			name, candidates(taken), runbox.ErrNameInUse)
	}
	return nil
}
