package providertest

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// testZeroDelayCancel races Start against Cancel with random delays, in both
// orders, hundreds of times.
func testZeroDelayCancel(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx, "--retention=200ms")
	probe, base := s.baseline(t)
	m := newMarker()

	const rounds, workers = 500, 4
	var (
		mu                               sync.Mutex
		neverStarted, cancelled143, k137 int
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan string, rounds)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				outcome, msg := zeroDelayRound(s.c, m, i)
				if msg != "" {
					errs <- msg
					continue
				}
				mu.Lock()
				switch outcome {
				case 0:
					neverStarted++
				case 143:
					cancelled143++
				case 137:
					k137++
				}
				mu.Unlock()
			}
		})
	}
	for i := range rounds {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	n := 0
	for msg := range errs {
		if n++; n <= 10 {
			t.Error(msg)
		}
	}
	if n > 10 {
		t.Errorf("... and %d more failed rounds", n-10)
	}
	t.Logf("%d rounds: %d refused as never started, %d stopped with 143, %d with 137", rounds, neverStarted, cancelled143, k137)
	// The case exists for the race between the two orders: both must have
	// happened, or it tested one path only.
	if n == 0 && (neverStarted == 0 || cancelled143+k137 == 0) {
		t.Errorf("over %d rounds with random delays, %d execs were refused before they started and %d were stopped after: want both outcomes",
			rounds, neverStarted, cancelled143+k137)
	}
	s.noSurvivors(t, m)
	s.closeClient(s.c)
	s.expectSettled(t, probe, base)
}

// zeroDelayRound runs one Start/Cancel race and returns how the exec ended
// (0 never started, or its exit code) or a failure message.
func zeroDelayRound(c *client.Client, marker string, i int) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id := newID(fmt.Sprintf("zdc%d", i))
	startDelay := time.Duration(mrand.IntN(5001)) * time.Microsecond
	cancelDelay := time.Duration(mrand.IntN(5001)) * time.Microsecond

	var (
		wg        sync.WaitGroup
		cancelErr error
		startErr  error
		waitErr   error
		res       runbox.Result
	)
	wg.Go(func() {
		time.Sleep(cancelDelay)
		cancelErr = c.Cancel(ctx, id, 0)
	})
	wg.Go(func() {
		time.Sleep(startDelay)
		var p *client.Process
		p, startErr = c.Start(ctx, marker, client.WithID(id))
		if startErr == nil {
			res, waitErr = p.Wait(ctx)
		}
	})
	wg.Wait()
	where := fmt.Sprintf("round %d (exec %s, start after %v, cancel after %v)", i, id, startDelay, cancelDelay)
	if cancelErr != nil {
		return 0, fmt.Sprintf("%s: cancel: %v", where, cancelErr)
	}
	if startErr != nil {
		if !errors.Is(startErr, runbox.ErrCancelled) {
			return 0, fmt.Sprintf("%s: start: %v; want success or ErrCancelled", where, startErr)
		}
		return 0, ""
	}
	if waitErr != nil {
		return 0, fmt.Sprintf("%s: wait: %v", where, waitErr)
	}
	if !res.Cancelled || (res.ExitCode != 143 && res.ExitCode != 137) {
		return 0, fmt.Sprintf("%s: %s; want cancelled with exit 143 or 137", where, describe(res))
	}
	return res.ExitCode, ""
}
