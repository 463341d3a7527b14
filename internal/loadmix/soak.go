package loadmix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// SoakHeadroom is added to a call's own bound (timeout plus grace) before
// it counts as wedged.
const SoakHeadroom = 30 * time.Second

// DefaultFloodBytes is the size of a soak flood command's output.
const DefaultFloodBytes = 10 << 20

// Soak is one run of the soak mix against one runboxd.
type Soak struct {
	// Client reaches the runboxd under load.
	Client *client.Client
	// Ops is how many commands the run sends; Workers how many at a time
	// (0 means 8).
	Ops, Workers int
	// Marker is the argument of every `sleep` the run starts (digits, e.g.
	// "31341234567"), new for each run: processes still alive with it
	// afterwards survived. It is also part of every exec id the run gives.
	Marker string
	// FloodBytes is the output of each flood command; 0 means
	// DefaultFloodBytes.
	FloodBytes int
	// Logf, when set, gets the first errors and the progress.
	Logf func(format string, args ...any)
}

// SoakCounts is what a soak run counted.
type SoakCounts struct {
	ByKind map[string]int
	// Errors counts calls that failed (a wedge is one); Wedges calls that
	// had not returned by their bound plus SoakHeadroom.
	Errors, Wedges int
	// BytesLost counts flood bytes that did not reach the client intact.
	BytesLost int64
	// FirstErrors keeps the first ten errors, each naming its command.
	FirstErrors []error
}

// Run sends the run's commands and counts the outcomes. It returns when
// every command has returned or ctx ends.
func (s *Soak) Run(ctx context.Context) SoakCounts {
	workers := s.Workers
	if workers <= 0 {
		workers = 8
	}
	flood := s.FloodBytes
	if flood <= 0 {
		flood = DefaultFloodBytes
	}
	floodSum := sha256.Sum256(bytes.Repeat([]byte{'a'}, flood))
	counts := SoakCounts{ByKind: map[string]int{}}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1))
				if i > s.Ops {
					return
				}
				kind, lost, err := soakOp(ctx, s.Client, w, i, s.Marker, flood, floodSum)
				mu.Lock()
				counts.ByKind[kind]++
				counts.BytesLost += lost
				if errors.Is(err, context.DeadlineExceeded) {
					counts.Wedges++
				}
				if err != nil {
					counts.Errors++
					if len(counts.FirstErrors) < 10 {
						err = fmt.Errorf("op %d (%s): %w", i, kind, err)
						counts.FirstErrors = append(counts.FirstErrors, err)
						if s.Logf != nil {
							s.Logf("soak: %v", err)
						}
					}
				}
				mu.Unlock()
				if i%1000 == 0 && s.Logf != nil {
					s.Logf("soak: %d of %d commands", i, s.Ops)
				}
			}
		})
	}
	wg.Wait()
	return counts
}

// soakOp runs command i of worker w: its kind, the bytes it lost, and what
// went wrong.
func soakOp(ctx context.Context, c *client.Client, w, i int, marker string, flood int, floodSum [32]byte) (kind string, lost int64, err error) {
	bound := func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, d+SoakHeadroom)
	}
	id := fmt.Sprintf("k%s-%d-%d", marker, w, i) // new for each run, as Stress's
	switch i % 8 {
	case 0, 1:
		kind = "quick"
		cctx, cancel := bound(0)
		defer cancel()
		res, err := c.Exec(cctx, "echo "+id)
		if err == nil && string(res.Stdout) != id+"\n" {
			err = fmt.Errorf("stdout %q", res.Stdout)
		}
		return kind, 0, err
	case 2:
		kind = "timeout"
		cctx, cancel := bound(time.Second + 50*time.Millisecond)
		defer cancel()
		res, err := c.Exec(cctx, "sleep "+marker, client.WithTimeout(50*time.Millisecond), client.WithGrace(time.Second))
		if err == nil && !res.TimedOut {
			err = fmt.Errorf("not timed out: exit %d", res.ExitCode)
		}
		return kind, 0, err
	case 3:
		kind = "cancel-racing-start"
		cctx, cancel := bound(runbox.DefaultGrace)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(cctx, "sleep "+marker, client.WithID(id))
			if errors.Is(err, runbox.ErrCancelled) {
				err = nil
			}
			done <- err
		}()
		time.Sleep(rand.N(2 * time.Millisecond))
		if err := c.Cancel(cctx, id, 0); err != nil {
			return kind, 0, err
		}
		return kind, 0, <-done
	case 4:
		kind = "flood"
		cctx, cancel := bound(0)
		defer cancel()
		h := &countingHash{Hash: sha256.New()}
		res, err := c.Exec(cctx, fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", flood), client.WithStdout(h))
		if err != nil {
			return kind, 0, err
		}
		if !bytes.Equal(h.Sum(nil), floodSum[:]) || res.StdoutBytes != int64(flood) {
			return kind, max(int64(flood)-h.n, 1), fmt.Errorf("flood: %d bytes streamed, %d produced, checksum differs", h.n, res.StdoutBytes)
		}
		return kind, 0, nil
	case 5:
		kind = "background"
		cctx, cancel := bound(runbox.DefaultGrace)
		defer cancel()
		res, err := c.Exec(cctx, "sleep "+marker+" >/dev/null 2>&1 & echo up", client.WithID(id))
		if err != nil {
			return kind, 0, err
		}
		if res.LeftRunning != 1 {
			return kind, 0, fmt.Errorf("left running %d, want 1", res.LeftRunning)
		}
		return kind, 0, c.Cancel(cctx, id, 0)
	case 6:
		kind = "pty"
		cctx, cancel := bound(0)
		defer cancel()
		res, err := c.Exec(cctx, "echo pty-"+id, client.WithPTY(24, 80))
		if err == nil && !bytes.Contains(res.Stdout, []byte("pty-"+id)) {
			err = fmt.Errorf("pty stdout %q", res.Stdout)
		}
		return kind, 0, err
	default:
		kind = "observer-detaches"
		cctx, cancel := bound(0)
		defer cancel()
		p, err := c.Start(cctx, "seq 1 200000", client.WithID(id))
		if err != nil {
			return kind, 0, err
		}
		octx, detach := context.WithCancel(cctx)
		_, _ = c.Attach(octx, id, client.WithStdout(writerFunc(func(b []byte) (int, error) {
			detach() // mid-stream
			return len(b), nil
		})))
		detach()
		res, err := p.Wait(cctx)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d", res.ExitCode)
		}
		return kind, 0, err
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// countingHash hashes and counts what is written to it.
type countingHash struct {
	hash.Hash
	n int64
}

func (h *countingHash) Write(b []byte) (int, error) {
	h.n += int64(len(b))
	return h.Hash.Write(b)
}
