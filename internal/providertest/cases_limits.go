package providertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// testForkBombBesideServing: while a fork bomb holds every process its pids
// limit allows, other clients keep asking for commands. runboxd needs
// threads of its own to serve them, and the Go runtime aborts the whole
// process when it cannot make one: the limit must leave runboxd room. The
// other commands may fail to fork, clearly; the sandbox is never lost, the
// bomb leaves no survivor, and the sandbox serves at once afterwards.
func testForkBombBesideServing(t *testing.T, fx Fixture) {
	if !fx.PidsLimit {
		skipNoLimit(t, fx, "pids")
	}
	spec := fx.Spec
	spec.Pids = 64
	s := newSandboxSpec(t, fx, spec)
	for round := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
		bombDone := make(chan struct{})
		var clients sync.WaitGroup
		for i := range 12 {
			clients.Go(func() {
				for j := 0; ; j++ {
					select {
					case <-bombDone:
						return
					default:
					}
					_, err := s.c.Exec(ctx, fmt.Sprintf("echo %d; sleep 0.0%d", i, j%10), client.WithTimeout(2*time.Second))
					if errors.Is(err, runbox.ErrSandboxLost) {
						t.Errorf("round %d: a command beside the fork bomb: %v", round, err)
						return
					}
				}
			})
		}
		m := newMarker()
		res, err := s.c.Exec(ctx, ": "+m+"; f(){ f|f& }; f; sleep 60", client.WithTimeout(3*time.Second), client.WithGrace(time.Second))
		close(bombDone)
		clients.Wait()
		cancel()
		if err != nil {
			t.Fatalf("round %d: fork bomb: %v", round, err)
		}
		if !res.TimedOut {
			t.Errorf("round %d: fork bomb with a 3s timeout: %s, want timed out", round, describe(res))
		}
		s.noSurvivors(t, m)
		// The sandbox serves again: the timeout only bounds a hang (the
		// claim is that it works, not how fast on a loaded machine).
		wantOK(t, s.exec(t, "echo ok", client.WithTimeout(time.Minute)), "ok\n")
	}
}

// testOOMKillerSparesDaemon: when the memory limit is reached by many
// processes, each smaller than runboxd, the OOM killer kills some of them
// and never runboxd.
func testOOMKillerSparesDaemon(t *testing.T, fx Fixture) {
	if !fx.MemoryLimit {
		skipNoLimit(t, fx, "memory")
	}
	spec := fx.Spec
	spec.Memory = 128 << 20
	s := newSandboxSpec(t, fx, spec)
	before := s.info(t, s.c)
	// 60 subshells of about 6 MiB each (a 3 MB string, and its copy in
	// the making) need far more than 128 MiB.
	res := s.exec(t, `pids=; for i in $(seq 60); do ( x=$(head -c 3000000 /dev/zero | tr '\0' b); sleep 2 ) & pids="$pids $!"; done
k=0; for p in $pids; do wait $p || k=$((k+1)); done; echo killed $k`, client.WithTimeout(time.Minute))
	// The OOM killer takes hogs, each reported by the waiting shell; or,
	// when that shell is the largest command at its moment (also at
	// oom_score_adj 1000, like every command), the shell itself, and the
	// exec ends by SIGKILL with its OOM kill recorded. Either way commands
	// died, and (below) runboxd did not.
	var killed int
	_, serr := fmt.Sscanf(string(res.Stdout), "killed %d", &killed)
	hogsKilled := serr == nil && res.ExitCode == 0 && killed > 0
	shellKilled := res.ExitCode == 137 && res.OOMKilled
	if !hogsKilled && !shellKilled {
		t.Errorf("60 small hogs under 128 MiB: %s, want some of them (or their shell) killed by the OOM killer", describe(res))
	}
	after := s.info(t, s.c)
	if after.Pid != before.Pid || !after.StartedAt.Equal(before.StartedAt) {
		t.Errorf("runboxd changed from pid %d to pid %d: the OOM killer chose it", before.Pid, after.Pid)
	}
	wantOK(t, s.exec(t, "echo ok"), "ok\n")
}

// skipNoLimit skips a case that needs the provider's limit of kind.
func skipNoLimit(t *testing.T, fx Fixture, kind string) {
	t.Helper()
	if fx.NoLimitsReason != "" {
		t.Skipf("no %s limit here: %s", kind, fx.NoLimitsReason)
	}
	t.Skipf("the provider has no %s limit", kind)
}
