package providertest

import (
	"context"
	"fmt"
	"testing"

	"github.com/runbox/runbox/client"
)

// testStarvedStillAnswers: while one command pins every CPU and holds most
// of the sandbox's memory limit, runboxd still answers Info and runs a new
// command (what peers' users report freezing: a hogging command starving
// the control channel); the hog is then cancelled, and the sandbox is the
// same (runboxd was neither killed nor restarted). The calls are bounded
// by the suite's liveness limits, not timed.
//
// A provider without a memory limit (host) runs the same hog with no
// limit to fill: every CPU pinned and the same 40-80 MB held.
func testStarvedStillAnswers(t *testing.T, fx Fixture) {
	spec := fx.Spec
	if fx.MemoryLimit {
		spec.Memory = 128 << 20
	} else {
		t.Log("no memory limit here: the hog pins every CPU and holds its memory without a limit to fill")
	}
	s := newSandboxSpec(t, fx, spec)
	before := s.info(t, s.c)
	m := newMarker()
	// One busy loop per CPU the sandbox sees, and most of the memory
	// limit held (a 40 MB string in a shell, which keeps it while it
	// grows: up to about twice that) until cancelled.
	hog := fmt.Sprintf(`for i in $(seq $(nproc)); do (while :; do :; done) & done
x=$(head -c 40000000 /dev/zero | tr '\0' h); echo held; %s`, m)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	ready := make(chan struct{})
	p, err := s.c.Start(ctx, hog, client.WithStdout(&readyWriter{ready: ready}), client.WithGrace(-1))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if res, err := p.Wait(ctx); err == nil && !res.Cancelled {
			t.Errorf("the hog ended by itself: %s", describe(res))
		}
	}()
	select {
	case <-ready:
	case <-ended:
		t.FailNow()
	case <-ctx.Done():
		t.Fatalf("the hog never held its memory: %v", ctx.Err())
	}
	info := s.info(t, s.c)
	if info.Pid != before.Pid || info.Running == 0 {
		t.Errorf("during the hog: runboxd pid %d (was %d), %d running; want the same daemon, the hog running", info.Pid, before.Pid, info.Running)
	}
	wantOK(t, s.exec(t, "echo ok"), "ok\n")
	if err := p.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	<-ended
	s.noSurvivors(t, m)
	after := s.info(t, s.c)
	if after.Pid != before.Pid || !after.StartedAt.Equal(before.StartedAt) {
		t.Errorf("runboxd changed from pid %d to pid %d under the hog", before.Pid, after.Pid)
	}
}

// readyWriter closes ready at the first write.
type readyWriter struct {
	ready chan struct{}
	once  bool
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if !w.once {
		w.once = true
		close(w.ready)
	}
	return len(p), nil
}
