package server_test

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/host"
)

// snapHost is the host provider with snapshots kept in memory, each taken
// after a random delay, so that concurrent snapshots of a tenant overlap
// in every order. It stands in for a provider's snapshot (the server's
// quota, names and registry are what is tested).
type snapHost struct {
	*host.Provider
	mu    sync.Mutex
	snaps map[string]runbox.Snapshot
}

var _ runbox.Snapshotter = (*snapHost)(nil)

func (p *snapHost) Snapshot(ctx context.Context, sb runbox.Sandbox, name string, _ runbox.SnapshotOptions) (runbox.Snapshot, error) {
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.snaps[name]; ok {
		return runbox.Snapshot{}, fmt.Errorf("snapshot %s: %w", name, runbox.ErrInvalidSpec)
	}
	sn := runbox.Snapshot{Name: name, Provider: "host", Sandbox: sb.ID, Created: time.Now()}
	p.snaps[name] = sn
	return sn, nil
}

func (p *snapHost) Snapshots(context.Context) ([]runbox.Snapshot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []runbox.Snapshot
	for _, s := range p.snaps {
		out = append(out, s)
	}
	return out, nil
}

func (p *snapHost) RemoveSnapshot(_ context.Context, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.snaps[name]; !ok {
		return fmt.Errorf("snapshot %s: %w", name, runbox.ErrInvalidSpec)
	}
	delete(p.snaps, name)
	return nil
}

// names returns the provider's snapshot names, sorted.
func (p *snapHost) names() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for n := range p.snaps {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// TestSnapshotQuotaRace: two tenants each race eight CreateSnapshots
// (after random delays, each taking a random time), four of them under the
// same random name, against max_snapshots 3 with 0 to 3 snapshots kept
// already, 200 rounds under -race. In every round each tenant ends with
// at most its quota (and at least one new snapshot when it had room);
// one create of the shared name wins and the others are
// already_exists or over the quota; the other tenant's snapshots count
// nothing against it; and the provider holds exactly the snapshots the
// registry knows (a losing create leaves no orphan behind).
func TestSnapshotQuotaRace(t *testing.T) {
	const max, racers, rounds = 3, 8, 200
	sh := &snapHost{snaps: map[string]runbox.Snapshot{}}
	ts := startServer(t, func(c *serverConfig) {
		sh.Provider = c.Providers["host"].(*host.Provider)
		c.Providers["host"] = sh
		c.Quotas.MaxSnapshots = max
	})
	ctx := ctxT(t)
	tenants := map[string]runbox.Sandbox{}
	clients := map[string]*snapClient{}
	for _, name := range []string{"a", "b"} {
		srv := ts.tenant(t, name)
		sb, err := srv.Create(ctx, runbox.SandboxSpec{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Remove(context.Background(), sb, true) })
		tenants[name] = sb
		clients[name] = &snapClient{srv: srv}
	}
	for round := range rounds {
		kept := map[string]int{}
		for name, sb := range tenants {
			kept[name] = rand.IntN(max + 1)
			for i := range kept[name] {
				if _, err := clients[name].srv.Snapshot(ctx, sb, fmt.Sprintf("kept-%d", i), runbox.SnapshotOptions{}); err != nil {
					t.Fatalf("round %d: tenant %s: snapshot %d of %d kept: %v", round, name, i, kept[name], err)
				}
			}
		}
		shared := "shared-" + crand.Text()[:10]
		var wg sync.WaitGroup
		var mu sync.Mutex
		made := map[string][]string{}
		for name, sb := range tenants {
			for i := range racers {
				wg.Go(func() {
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
					sn := fmt.Sprintf("race-%d", i)
					if i%2 == 0 {
						sn = shared
					}
					_, err := clients[name].srv.Snapshot(ctx, sb, sn, runbox.SnapshotOptions{})
					if err != nil && !errors.Is(err, runbox.ErrQuotaExceeded) && !errors.Is(err, runbox.ErrNameInUse) {
						t.Errorf("round %d: tenant %s: snapshot %s: %v, want success, ErrQuotaExceeded or ErrNameInUse", round, name, sn, err)
					}
					if err == nil {
						mu.Lock()
						made[name] = append(made[name], sn)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		for name := range tenants {
			ss, err := clients[name].srv.Snapshots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ss) > max || len(ss) != kept[name]+len(made[name]) || len(made[name]) == 0 && kept[name] < max {
				t.Errorf("round %d: tenant %s kept %d and made %v: it has %d snapshots, want at most max_snapshots %d, and what it made", round, name, kept[name], made[name], len(ss), max)
			}
			sharedWins := 0
			for _, sn := range made[name] {
				if sn == shared {
					sharedWins++
				}
			}
			if sharedWins > 1 {
				t.Errorf("round %d: tenant %s: %d creates of the name %s succeeded", round, name, sharedWins, shared)
			}
			for _, s := range ss {
				if err := clients[name].srv.RemoveSnapshot(ctx, s.Name); err != nil {
					t.Fatal(err)
				}
			}
		}
		if left := sh.names(); len(left) != 0 {
			t.Errorf("round %d: the provider holds snapshots the registry does not know: %v", round, left)
		}
		if t.Failed() {
			return
		}
	}
}

// snapClient is a tenant's client in TestSnapshotQuotaRace.
type snapClient struct {
	srv interface {
		Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error)
		Snapshots(ctx context.Context) ([]runbox.Snapshot, error)
		RemoveSnapshot(ctx context.Context, name string) error
	}
}
