package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// SoakReport is the soak's outcome: how runboxd's footprint moved across a
// long run of mixed commands, and what went wrong. Goal: 0 wedges, 0
// survivors, 0 bytes lost, and the footprint flat (the last tenth of the
// samples within 10% of the first tenth).
type SoakReport struct {
	Commands  int            `json:"commands"`
	Workers   int            `json:"workers"`
	Seconds   float64        `json:"seconds"`
	ByKind    map[string]int `json:"by_kind"`
	Errors    int            `json:"errors"`
	Wedges    int            `json:"wedges"`
	Survivors int            `json:"survivors"`
	BytesLost int64          `json:"bytes_lost"`
	Samples   []SoakSample   `json:"samples"`
	// First and Last are the means of the first and last tenth of the
	// samples.
	First SoakSample `json:"first_tenth"`
	Last  SoakSample `json:"last_tenth"`
}

// SoakSample is runboxd's footprint at one moment of the soak.
type SoakSample struct {
	At         float64 `json:"at_s"`
	RSSKB      float64 `json:"rss_kb"`
	FDs        float64 `json:"fds"`
	Goroutines float64 `json:"goroutines"`
}

// soakHeadroom is added to a call's own bound (timeout plus grace) before
// it counts as wedged.
const soakHeadroom = 30 * time.Second

// soakFlood is the size of a flood command's output.
const soakFlood = 10 << 20

// benchSoak runs cfg.soakOps mixed commands in one host sandbox from 8
// workers, sampling runboxd every second.
func benchSoak(ctx context.Context, cfg *config, env *sandboxes) (*SoakReport, error) {
	id := env.get("host")
	if id == "" {
		return nil, errors.New("no host sandbox")
	}
	c, err := env.clientOf(ctx, id)
	if err != nil {
		return nil, err
	}
	pid, err := env.daemonPid(id)
	if err != nil {
		return nil, err
	}
	rep := &SoakReport{Commands: cfg.soakOps, Workers: 8, ByKind: map[string]int{}}
	marker := strconv.Itoa(50000000 + rand.IntN(9000000))
	floodSum := sha256.Sum256(bytes.Repeat([]byte{'a'}, soakFlood))
	start := time.Now()

	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			info, err := c.Info(ctx)
			if err == nil {
				rep.Samples = append(rep.Samples, SoakSample{
					At: time.Since(start).Seconds(), RSSKB: float64(statusKB(pid, "VmRSS")),
					FDs: float64(info.OpenFDs), Goroutines: float64(info.Goroutines),
				})
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	})

	var next atomic.Int64
	var mu sync.Mutex
	var workers sync.WaitGroup
	for w := range rep.Workers {
		workers.Go(func() {
			for {
				i := int(next.Add(1))
				if i > cfg.soakOps {
					return
				}
				kind, lost, err := soakOp(ctx, c, w, i, marker, floodSum)
				mu.Lock()
				rep.ByKind[kind]++
				rep.BytesLost += lost
				if errors.Is(err, context.DeadlineExceeded) {
					rep.Wedges++
				}
				if err != nil {
					rep.Errors++
					if rep.Errors <= 10 {
						log.Printf("soak: op %d (%s): %v", i, kind, err)
					}
				}
				mu.Unlock()
				if i%1000 == 0 {
					log.Printf("soak: %d of %d commands", i, cfg.soakOps)
				}
			}
		})
	}
	workers.Wait()
	close(stopSampling)
	sampling.Wait()
	rep.Seconds = time.Since(start).Seconds()
	// Every background process was cancelled and every cancel waited for.
	rep.Survivors = countMarker(marker)
	rep.First, rep.Last = tenthMean(rep.Samples, false), tenthMean(rep.Samples, true)
	return rep, nil
}

// soakOp runs command i of worker w: its kind, the bytes it lost, and what
// went wrong.
func soakOp(ctx context.Context, c *client.Client, w, i int, marker string, floodSum [32]byte) (kind string, lost int64, err error) {
	bound := func(d time.Duration) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, d+soakHeadroom)
	}
	id := fmt.Sprintf("k%d-%d", w, i)
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
		res, err := c.Exec(cctx, fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a", soakFlood), client.WithStdout(h))
		if err != nil {
			return kind, 0, err
		}
		if !bytes.Equal(h.Sum(nil), floodSum[:]) || res.StdoutBytes != soakFlood {
			return kind, max(soakFlood-h.n, 1), fmt.Errorf("flood: %d bytes streamed, %d produced, checksum differs", h.n, res.StdoutBytes)
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

// tenthMean is the mean of the first (or last) tenth of the samples.
func tenthMean(ss []SoakSample, last bool) SoakSample {
	n := max(len(ss)/10, 1)
	if len(ss) == 0 {
		return SoakSample{}
	}
	part := ss[:min(n, len(ss))]
	if last {
		part = ss[len(ss)-min(n, len(ss)):]
	}
	var m SoakSample
	for _, s := range part {
		m.RSSKB += s.RSSKB / float64(len(part))
		m.FDs += s.FDs / float64(len(part))
		m.Goroutines += s.Goroutines / float64(len(part))
	}
	return m
}

// writeSoak writes the soak's report as soak.json and its plot as
// soak.png in dir, apart from results.json: a soak is run on its own.
func writeSoak(dir string, rep *SoakReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("runboxd across a soak of %d mixed commands (8 workers)", rep.Commands)
	p.X.Label.Text, p.Y.Label.Text = "seconds into the run", "RSS (MiB), open fds, goroutines"
	var rss, fds, gs plotter.XYs
	for _, s := range rep.Samples {
		rss = append(rss, plotter.XY{X: s.At, Y: s.RSSKB / 1024})
		fds = append(fds, plotter.XY{X: s.At, Y: s.FDs})
		gs = append(gs, plotter.XY{X: s.At, Y: s.Goroutines})
	}
	for i, l := range []struct {
		name string
		xy   plotter.XYs
	}{{"RSS (MiB)", rss}, {"open fds", fds}, {"goroutines", gs}} {
		if len(l.xy) == 0 {
			continue
		}
		if err := addLine(p, i, l.name, l.xy); err != nil {
			return err
		}
	}
	return saveLines(p, filepath.Join(dir, "soak.png"), true)
}

// printSoak prints the soak's figures as a Markdown table.
func printSoak(rep *SoakReport) {
	fmt.Printf("\n### Soak: %d commands, %d workers, %.0f s\n\n", rep.Commands, rep.Workers, rep.Seconds)
	fmt.Println("| wedges | survivors | bytes lost | errors | RSS first→last tenth (MiB) | fds | goroutines |")
	fmt.Println("|---|---|---|---|---|---|---|")
	fmt.Printf("| %d | %d | %d | %d | %.1f → %.1f | %.0f → %.0f | %.0f → %.0f |\n",
		rep.Wedges, rep.Survivors, rep.BytesLost, rep.Errors,
		rep.First.RSSKB/1024, rep.Last.RSSKB/1024, rep.First.FDs, rep.Last.FDs, rep.First.Goroutines, rep.Last.Goroutines)
	fmt.Printf("\nby kind: %v\n", rep.ByKind)
}
