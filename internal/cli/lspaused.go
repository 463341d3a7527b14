package cli

import (
	"context"
	"sync"
	"time"

	"github.com/runbox/runbox"
)

// pausedProbeTimeout bounds ls's Info call asking one sandbox's runboxd
// whether it is paused, as the providers bound their own alive probes.
const pausedProbeTimeout = time.Second

// pausedProbes is how many of those calls ls makes at once.
const pausedProbes = 8

// markPaused sets Detail "paused" to "true" on each live sandbox of sbs
// (all p's) whose runboxd says it is paused. A provider that pauses the
// whole sandbox (runbox.Pauser: docker) already says so in its records,
// and its runboxd is frozen with it; a server's records say so too. For
// the rest (local, host, ssh, kubernetes) runboxd is the only one that
// knows: it is asked, and a sandbox that does not answer in time is left
// as the provider listed it.
func (a *app) markPaused(ctx context.Context, p runbox.Provider, sbs []runbox.Sandbox) {
	if _, ok := p.(runbox.Pauser); ok {
		return
	}
	if _, ok := p.(*remoteProvider); ok {
		return
	}
	sem := make(chan struct{}, pausedProbes)
	var wg sync.WaitGroup
	for i := range sbs {
		if !sbs[i].Alive || sbs[i].Detail["paused"] != "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(sb *runbox.Sandbox) {
			defer func() { <-sem; wg.Done() }()
			cl := a.clientFor(p, *sb)
			defer cl.Close()
			ictx, cancel := context.WithTimeout(ctx, pausedProbeTimeout)
			defer cancel()
			if info, err := cl.Info(ictx); err == nil && info.Paused {
				sb.Detail = withPaused(sb.Detail)
			}
		}(&sbs[i])
	}
	wg.Wait()
}

// withPaused is a copy of detail with "paused" set to "true" (a copy: the
// provider's map may be shared).
func withPaused(detail map[string]string) map[string]string {
	out := make(map[string]string, len(detail)+1)
	for k, v := range detail {
		out[k] = v
	}
	out["paused"] = "true"
	return out
}
