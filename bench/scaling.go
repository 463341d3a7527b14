package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// Concurrency is `true` run by n workers at once, each in a loop: through
// one host sandbox (one Go client, one connection) and as bare spawns from
// this process.
type Concurrency struct {
	Workers int `json:"workers"`
	// Per-exec latency (ms) and execs per second, both ways.
	Runbox      Stat    `json:"runbox_ms"`
	Bare        Stat    `json:"bare_ms"`
	RunboxRate  float64 `json:"runbox_execs_per_s"`
	BareRate    float64 `json:"bare_execs_per_s"`
	LatencyRate float64 `json:"median_latency_ratio"`
}

func benchConcurrent(ctx context.Context, cfg *config, env *sandboxes) ([]Concurrency, error) {
	c, err := env.hostClient(ctx)
	if err != nil {
		return nil, err
	}
	total := 256
	if cfg.quick {
		total = 64
	}
	var out []Concurrency
	for _, n := range []int{1, 4, 16, 64} {
		perWorker := max(total/n, 2)
		viaRunbox := func() error {
			res, err := c.Exec(ctx, "true")
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return err
		}
		bare := func() error { return exec.Command("bash", "-c", "true").Run() }
		// Interleaved: bare, runbox, bare, runbox.
		var rbLat, bareLat []float64
		var rbWall, bareWall time.Duration
		for range 2 {
			lat, wall, err := concurrently(n, perWorker, bare)
			if err != nil {
				return nil, err
			}
			bareLat, bareWall = append(bareLat, lat...), bareWall+wall
			lat, wall, err = concurrently(n, perWorker, viaRunbox)
			if err != nil {
				return nil, err
			}
			rbLat, rbWall = append(rbLat, lat...), rbWall+wall
		}
		cc := Concurrency{Workers: n, Runbox: stat(rbLat), Bare: stat(bareLat),
			RunboxRate: float64(len(rbLat)) / rbWall.Seconds(), BareRate: float64(len(bareLat)) / bareWall.Seconds()}
		cc.LatencyRate = cc.Runbox.Median / cc.Bare.Median
		out = append(out, cc)
	}
	return out, nil
}

// concurrently runs op perWorker times in each of n goroutines and returns
// every op's latency (ms) and the wall time of the whole.
func concurrently(n, perWorker int, op func() error) ([]float64, time.Duration, error) {
	var mu sync.Mutex
	var lat []float64
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Go(func() {
			for range perWorker {
				t := time.Now()
				err := op()
				d := time.Since(t)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, ms(d))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start), firstErr
}

// SandboxScale is n host sandboxes on one machine: how fast they are made,
// what an idle one costs in memory, and its first exec.
type SandboxScale struct {
	Sandboxes int `json:"sandboxes"`
	// CreateMs is Create per sandbox (until runboxd answers), made one
	// after another while the earlier ones stay up.
	CreateMs Stat `json:"create_ms"`
	// CreatePerS is sandboxes made per second.
	CreatePerS float64 `json:"create_per_s"`
	// IdleRSSKB is the resident size of each idle runboxd, after its
	// first exec.
	IdleRSSKB Stat `json:"idle_rss_kb"`
	// FirstExecMs is each sandbox's first Exec("true") on a fresh client
	// (dial, authenticate, run), against BareMs, a bare spawn of the same
	// measured right after it.
	FirstExecMs Stat `json:"first_exec_ms"`
	BareMs      Stat `json:"bare_ms"`
	FirstRatio  Stat `json:"first_exec_ratio"`
	// BaselineRSSKB is the resident size of a bare `sleep` process: what
	// any process costs before it does anything.
	BaselineRSSKB int64 `json:"baseline_sleep_rss_kb"`
}

func benchSandboxes(ctx context.Context, cfg *config) ([]SandboxScale, error) {
	counts := []int{1, 10, 100}
	if cfg.quick {
		counts = []int{1, 10}
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		return nil, err
	}
	time.Sleep(50 * time.Millisecond) // let it exec before it is measured
	sleepRSS := statusKB(sleep.Process.Pid, "VmRSS")
	sleep.Process.Kill()
	sleep.Wait()

	var out []SandboxScale
	for _, n := range counts {
		home, err := os.MkdirTemp("/tmp", "rbs.")
		if err != nil {
			return nil, err
		}
		p := &host.Provider{Home: home, Runboxd: filepath.Join(cfg.bin, "runboxd")}
		var made []runbox.Sandbox
		remove := func() {
			for _, sb := range made {
				p.Remove(context.WithoutCancel(ctx), sb, true)
			}
			os.RemoveAll(home)
		}
		s := SandboxScale{Sandboxes: n, BaselineRSSKB: sleepRSS}
		var create, first, bare, ratio, rss []float64
		start := time.Now()
		for range n {
			t := time.Now()
			sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: cfg.workdir})
			if err != nil {
				remove()
				return nil, err
			}
			create = append(create, ms(time.Since(t)))
			made = append(made, sb)
		}
		s.CreatePerS = float64(n) / time.Since(start).Seconds()
		for _, sb := range made {
			c := client.New(p.Dialer(sb))
			t := time.Now()
			_, err := c.Exec(ctx, "true")
			d := time.Since(t)
			c.Close()
			if err != nil {
				remove()
				return nil, err
			}
			t = time.Now()
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				remove()
				return nil, err
			}
			b := time.Since(t)
			first, bare, ratio = append(first, ms(d)), append(bare, ms(b)), append(ratio, ms(d)/ms(b))
			var pid int
			fmt.Sscan(sb.Detail["pid"], &pid)
			rss = append(rss, float64(statusKB(pid, "VmRSS")))
		}
		s.CreateMs, s.FirstExecMs, s.BareMs, s.FirstRatio, s.IdleRSSKB = stat(create), stat(first), stat(bare), stat(ratio), stat(rss)
		remove()
		out = append(out, s)
	}
	return out, nil
}
