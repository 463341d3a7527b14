package docker

import (
	"fmt"
	"sync"
	"testing"

	"github.com/runbox/runbox"
)

// TestDaemonClientCache: Pause and Resume's kept runboxd clients (daemon,
// forgetDaemon, Close; p.mu guards the map) hit from 8 goroutines at once
// under -race: one client per sandbox while it is kept, a fresh one after
// it is forgotten, none left after Close. Nothing is dialled.
func TestDaemonClientCache(t *testing.T) {
	p := &Provider{}
	sbs := make([]runbox.Sandbox, 4)
	for i := range sbs {
		id := fmt.Sprintf("%012x", i+1)
		sbs[i] = runbox.Sandbox{ID: id, Detail: map[string]string{"container": "c" + id}}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			sb := sbs[g%len(sbs)]
			for i := range 200 {
				c := p.daemon(sb)
				if g < len(sbs) && i%50 == 49 {
					p.forgetDaemon(sb.ID)
					if p.daemon(sb) == c {
						t.Errorf("sandbox %s: the same client after forgetDaemon", sb.ID)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, sb := range sbs {
		if p.daemon(sb) != p.daemon(sb) {
			t.Errorf("sandbox %s: two clients while kept", sb.ID)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	n := len(p.daemons)
	p.mu.Unlock()
	if n != 0 {
		t.Errorf("%d clients kept after Close, want 0", n)
	}
}
