package supervisor

import (
	"context"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// randomPause sleeps for up to max, and sometimes not at all, so racing
// goroutines meet at varying points.
func randomPause(max time.Duration) {
	if rand.IntN(3) > 0 {
		time.Sleep(rand.N(max))
	}
}

// TestStartRacesListAndSignal: List, Info and Signal run while Starts
// publish new execs. Under -race this caught the exec's containment being
// written by spawn after the exec was in the supervisor's map (and a torn
// read of it could crash the daemon).
func TestStartRacesListAndSignal(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			rounds := 60
			if testing.Short() {
				rounds = 20
			}
			for round := range rounds {
				var wg sync.WaitGroup
				done := make(chan struct{})
				id := "r" + strconv.Itoa(round)
				wg.Go(func() {
					for {
						select {
						case <-done:
							return
						default:
						}
						for _, info := range s.List() {
							_, _ = s.Signal(info.ID, syscall.Signal(0))
						}
						_, _ = s.Signal(id, syscall.Signal(0))
						_ = s.Info()
					}
				})
				randomPause(2 * time.Millisecond)
				e, _, err := s.Start(runbox.ExecSpec{ID: id, Command: "true"})
				if err != nil {
					t.Fatal(err)
				}
				randomPause(time.Millisecond)
				close(done)
				wg.Wait()
				if r := waitResult(t, e); r.ExitCode != 0 {
					t.Fatalf("round %d: %+v", round, r)
				}
			}
		})
	}
}

// TestObserverNeverStallsCommand: an observer (attach, Output) that never
// reads does not hold the command back. It loses its place instead, and
// the gaps it sees count exactly the bytes it missed. On the code before
// the fix every reader was flow-controlled: the command stalled on the
// full ring and never ended.
func TestObserverNeverStallsCommand(t *testing.T) {
	s := newSup(t, "off")
	const total = 50 << 20
	e, _, err := s.Start(runbox.ExecSpec{Command: "sleep 0.2; head -c " + strconv.Itoa(total) + " /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	idle := e.Output(1) // opened, never read until the end
	defer idle.Close()
	r := waitResult(t, e)
	if r.ExitCode != 0 || r.StdoutBytes != total {
		t.Fatalf("exit %d, %d bytes; want 0, %d", r.ExitCode, r.StdoutBytes, total)
	}
	var got, lost int64
	gaps := 0
	for {
		ev, err := idle.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Gap != nil {
			gaps++
			lost += ev.Gap.Bytes
			continue
		}
		got += int64(len(ev.Chunk.Data))
	}
	if gaps == 0 || got+lost != total {
		t.Errorf("observer read %d bytes and lost %d in %d gaps; want a gap, and %d in all", got, lost, gaps, total)
	}
}

// TestCancelReturnsAtOnce: cancelling an exec that has ended stops what it
// left running on its own; Cancel returns before the grace is over (the
// background process, which ignores SIGTERM, is still alive when it
// returns), and WaitStopped waits for the stop. On the code before the fix
// Cancel returned only once the process had been killed.
func TestCancelReturnsAtOnce(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			m := marker()
			r := run(t, s, runbox.ExecSpec{ID: "bg", Command: "(trap '' TERM; exec sleep " + m + ") & echo started"})
			if r.ExitCode != 0 || countAlive(m) != 1 {
				t.Fatalf("exit %d, %d alive; want 0, 1", r.ExitCode, countAlive(m))
			}
			e, known := s.Cancel("bg", 3*time.Second)
			if !known {
				t.Fatal("cancel: exec not known")
			}
			if n := countAlive(m); n != 1 {
				t.Errorf("Cancel returned after the stop: %d alive, want 1 (still in its grace)", n)
			}
			// A context that ends first ends the wait (the stop is in its
			// grace, since the process ignores SIGTERM).
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := e.WaitStopped(ctx); err == nil && countAlive(m) == 1 {
				t.Error("WaitStopped with an ended context returned nil while the stop runs")
			}
			if err := e.WaitStopped(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := countAlive(m); n != 0 {
				t.Errorf("after WaitStopped: %d alive, want 0", n)
			}
		})
	}
}

// TestRetainedOutputIsBounded: the replay rings of exited execs are kept
// within RetainedOutputBytes all together: the oldest let theirs go (a
// replay then starts with a Gap counting the bytes), the newest replay in
// full. Before the bound a busy sandbox held two rings per exec for the
// whole retention window (the soak grew runboxd to 1.6 GiB).
func TestRetainedOutputIsBounded(t *testing.T) {
	const ring, budget, execs = 64 << 10, 256 << 10, 12
	s, err := New(Config{CgroupMode: "off", RingBytes: ring, RetainedOutputBytes: budget, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	var all []*Exec
	for range execs {
		e, _, err := s.Start(runbox.ExecSpec{Command: "head -c " + strconv.Itoa(ring) + " /dev/zero"})
		if err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, e); r.StdoutBytes != ring {
			t.Fatalf("%+v", r)
		}
		all = append(all, e)
	}
	held := 0
	for _, e := range all {
		held += e.out.ringBytes()
	}
	if held > budget+ring {
		t.Errorf("exited execs hold %d bytes of rings, want at most %d", held, budget+ring)
	}
	replay := func(e *Exec) (got, lost int64) {
		r := e.Output(1)
		defer r.Close()
		for {
			ev, err := r.Next(context.Background())
			if err == io.EOF {
				return got, lost
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Gap != nil {
				lost += ev.Gap.Bytes
			} else {
				got += int64(len(ev.Chunk.Data))
			}
		}
	}
	if got, lost := replay(all[len(all)-1]); got != ring || lost != 0 {
		t.Errorf("newest exec replays %d bytes, loses %d; want %d, 0", got, lost, ring)
	}
	if got, lost := replay(all[0]); got != 0 || lost != ring {
		t.Errorf("oldest exec replays %d bytes, loses %d; want 0, %d", got, lost, ring)
	}
	if r := all[0].Result(); r.StdoutBytes != ring || len(r.Stdout) == 0 {
		t.Errorf("oldest exec's result lost its head and tail: %d bytes, %d kept", r.StdoutBytes, len(r.Stdout))
	}
}
