package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/runbox/runbox/internal/loadmix"
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
	start := time.Now()

	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			info, err := c.Info(ctx)
			if err == nil {
				s := SoakSample{
					At: time.Since(start).Seconds(), RSSKB: float64(statusKB(pid, "VmRSS")),
					FDs: float64(info.OpenFDs), Goroutines: float64(info.Goroutines),
				}
				rep.Samples = append(rep.Samples, s)
				// A partial report every minute: a run stopped early
				// still leaves its figures.
				if len(rep.Samples)%60 == 0 {
					log.Printf("soak: %.0f s: RSS %.1f MiB, %.0f fds, %.0f goroutines, %d execs so far",
						s.At, s.RSSKB/1024, s.FDs, s.Goroutines, info.Total)
					if err := writeSoakPartial(cfg.out, rep.Samples); err != nil {
						log.Printf("soak: %v", err)
					}
				}
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	})

	counts := (&loadmix.Soak{Client: c, Ops: cfg.soakOps, Workers: rep.Workers, Marker: marker, Logf: log.Printf}).Run(ctx)
	rep.ByKind, rep.Errors, rep.Wedges, rep.BytesLost = counts.ByKind, counts.Errors, counts.Wedges, counts.BytesLost
	close(stopSampling)
	sampling.Wait()
	rep.Seconds = time.Since(start).Seconds()
	// Every background process was cancelled and every cancel waited for.
	rep.Survivors = countMarker(marker)
	rep.First, rep.Last = tenthMean(rep.Samples, false), tenthMean(rep.Samples, true)
	return rep, nil
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
	if err := writeJSON(dir, "soak.json", rep); err != nil {
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

// writeSoakPartial writes the samples so far as soak-partial.json in dir.
func writeSoakPartial(dir string, samples []SoakSample) error {
	b, err := json.Marshal(samples)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "soak-partial.json"), append(b, '\n'), 0o644)
}

// replotSoakPartial writes soak.json and soak.png in dir from the
// soak-partial.json of a run stopped after commands commands (the last
// progress line of its log): the footprint only; the counts of wedges,
// errors, survivors and lost bytes are the log's, not the report's.
func replotSoakPartial(dir string, commands int) error {
	b, err := os.ReadFile(filepath.Join(dir, "soak-partial.json"))
	if err != nil {
		return err
	}
	rep := &SoakReport{Commands: commands, Workers: 8}
	if err := json.Unmarshal(b, &rep.Samples); err != nil {
		return fmt.Errorf("soak-partial.json: %w", err)
	}
	if len(rep.Samples) > 0 {
		rep.Seconds = rep.Samples[len(rep.Samples)-1].At
	}
	rep.First, rep.Last = tenthMean(rep.Samples, false), tenthMean(rep.Samples, true)
	if err := writeSoak(dir, rep); err != nil {
		return err
	}
	fmt.Printf("partial soak: %d commands, %.0f s; RSS first → last tenth %.1f → %.1f MiB, fds %.0f → %.0f, goroutines %.0f → %.0f\n",
		commands, rep.Seconds, rep.First.RSSKB/1024, rep.Last.RSSKB/1024, rep.First.FDs, rep.Last.FDs, rep.First.Goroutines, rep.Last.Goroutines)
	return nil
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
