package server_test

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/registry"
)

// TestConcurrentRunsKeepTheAuditRow: two Runs of one exec id race (a
// client retrying while its first call is still opening the row). Exactly
// one audit row per exec must hold its result. On the code before the fix
// the track was published before its row existed: the second Run started
// the exec at once, the first then saw it "attached", took it for a reused
// id and dropped the row, or the result was skipped for a row still at 0.
func TestConcurrentRunsKeepTheAuditRow(t *testing.T) {
	ts := startServer(t)
	srv := ts.tenant(t, "acme")
	ctx := ctxT(t)
	sb, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Remove(ctx, sb, true)
	const rounds = 40
	for round := range rounds {
		id := "twin-" + strconv.Itoa(round)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if rand.IntN(2) == 0 {
					time.Sleep(rand.N(2 * time.Millisecond))
				}
				res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{ID: id, Command: "exit 3"})
				if err != nil || res.ExitCode != 3 {
					t.Errorf("%s: %+v, %v", id, res, err)
				}
			})
		}
		wg.Wait()
	}
	rows, err := ts.store.Audit(ctx, registry.AuditFilter{Sandbox: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]registry.AuditRow{}
	for _, row := range rows {
		if row.Kind == registry.KindExec {
			byID[row.ExecID] = append(byID[row.ExecID], row)
		}
	}
	for round := range rounds {
		id := "twin-" + strconv.Itoa(round)
		got := byID[id]
		if len(got) != 1 || got[0].ExitCode == nil || *got[0].ExitCode != 3 || got[0].Outcome != registry.OutcomeExited {
			t.Errorf("%s: %d rows %+v; want one, exited with 3", id, len(got), got)
		}
	}
}
