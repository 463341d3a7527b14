package cli

import (
	"context"
	"strconv"
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
// (all p's) whose runboxd says its user paused it, and Detail "held" to
// the count of holds (a snapshot copying it) on each that is held frozen. A provider that pauses the
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
			if info, err := cl.Info(ictx); err == nil {
				sb.Detail = withFrozen(sb.Detail, info)
			}
		}(&sbs[i])
	}
	wg.Wait()
}

// withPaused is a copy of detail with "paused" set to "true" (a copy: the
// provider's map may be shared).
func withPaused(detail map[string]string) map[string]string {
	return withDetail(detail, "paused", "true")
}

// withFrozen is detail with what runboxd's info says of the sandbox's
// freeze: "paused" "true" when its user paused it, "held" the count of
// holds when it is held frozen (a snapshot's copy); detail itself when
// neither.
func withFrozen(detail map[string]string, info runbox.DaemonInfo) map[string]string {
	if info.Paused && detail["paused"] == "" {
		detail = withPaused(detail)
	}
	if info.Holds > 0 {
		detail = withDetail(detail, "held", strconv.Itoa(info.Holds))
	}
	return detail
}

// withDetail is a copy of detail with k set to v.
func withDetail(detail map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(detail)+1)
	for k, v := range detail {
		out[k] = v
	}
	out[k] = v
	return out
}
