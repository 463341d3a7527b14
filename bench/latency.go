package main

import (
	"context"
	"fmt"
	"log"
	"os/exec"
	"path/filepath"
	"time"
)

// LatencyReport holds the exec latency comparison: every way of running
// `true` once, round by round.
type LatencyReport struct {
	// Ways are the rows, in the order each round ran them.
	Ways []LatencyWay `json:"ways"`
	// Rounds and PerRound: each round runs each way PerRound times in turn.
	Rounds   int `json:"rounds"`
	PerRound int `json:"per_round"`
}

// LatencyWay is one way of running `true`, with its samples (ms) and its
// ratio to its baseline (the median of each round's ratio of medians).
type LatencyWay struct {
	Name     string    `json:"name"`
	Baseline string    `json:"baseline,omitempty"`
	Samples  []float64 `json:"samples_ms"`
	Stat     Stat      `json:"stat_ms"`
	Ratio    *Stat     `json:"ratio,omitempty"`
	// Goal is the goal for the ratio, where it set one.
	Goal float64 `json:"goal,omitempty"`
	// AddedMs is the median of each round's difference of medians to the
	// baseline, for rows whose goal is a cost added (GoalAddedMs).
	AddedMs     *Stat   `json:"added_ms,omitempty"`
	GoalAddedMs float64 `json:"goal_added_ms,omitempty"`
}

// way is a latency row while it is measured.
type way struct {
	name, baseline string
	goal           float64
	goalAddedMs    float64
	once           func() (time.Duration, error)
	perRound       [][]float64
}

func benchLatency(ctx context.Context, cfg *config, env *sandboxes) (*LatencyReport, error) {
	runbox := filepath.Join(cfg.bin, "runbox")
	cli := func(argv ...string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return timeCmd(argv) }
	}
	full := filepath.Join(cfg.bin, "runbox-full")
	ways := []*way{
		{name: "bash -c true", once: cli("bash", "-c", "true")},
		{name: "runbox version", baseline: "bash -c true", once: cli(runbox, "version")},
		// The binary with every provider: what runbox was before the
		// front (docs/cli.md, "Three binaries"), without the server
		// commands. Issue 31: its package inits, which every command
		// handed over pays.
		{name: "runbox-full version", baseline: "runbox version", goal: 3, once: cli(full, "version")},
		// The binary with the server commands too (serve, mcp, token,
		// audit, man): what runbox-full was before they moved out.
		{name: "runbox-server version", baseline: "runbox version", once: cli(filepath.Join(cfg.bin, "runbox-server"), "version")},
	}
	for _, p := range []string{"host", "local"} {
		if id := env.get(p); id != "" {
			// Issue 31: at most twice a bare shell.
			ways = append(ways, &way{name: "runbox exec (" + p + ")", baseline: "bash -c true", goal: 2,
				once: cli(runbox, "exec", id, "--", "true")})
		}
	}
	if id := env.get("host"); id != "" {
		// Issue 31: a name costs what an id costs (the name index).
		ways = append(ways, &way{name: "runbox exec NAME (host)", baseline: "runbox exec (host)", goal: 1.2,
			once: cli(runbox, "exec", sandboxName("host"), "--", "true")})
		ways = append(ways, &way{name: "runbox-full exec (host)", baseline: "bash -c true",
			once: cli(full, "exec", id, "--", "true")})
	}
	if id := env.get("docker"); id != "" {
		// Issue 31: ≥ 8× faster than docker exec, a ratio ≤ 0.125.
		ways = append(ways, &way{name: "runbox exec (docker)", baseline: "docker exec", goal: 0.125, once: cli(runbox, "exec", id, "--", "true")})
	}
	if id, kubectl := env.kubernetesSandbox(); id != "" {
		// Issue 31: ≥ 10× faster than kubectl exec, a ratio ≤ 0.1 (the
		// CLI through the sandbox's persistent endpoint, which the
		// warm-up starts).
		ways = append(ways, &way{name: "runbox exec (kubernetes)", baseline: "kubectl exec", goal: 0.1, once: cli(runbox, "exec", id, "--", "true")})
		ways = append(ways, &way{name: "kubectl exec", baseline: "bash -c true", once: cli(kubectl...)})
	}
	if sb := env.sshSandbox(); sb != nil {
		defer sb.close()
		// Issue 31: at least as fast as ssh through an OpenSSH
		// ControlMaster, a ratio ≤ 1 (the CLI through the sandbox's
		// persistent endpoint, which the warm-up starts; both to the
		// same loopback sshd).
		ways = append(ways, &way{name: "runbox exec (ssh)", baseline: "ssh (ControlMaster)", goal: 1, once: sb.exec})
		ways = append(ways, &way{name: "ssh (ControlMaster)", baseline: "bash -c true", once: sb.ssh})
	}
	if ctr := env.container(); ctr != "-" {
		ways = append(ways, &way{name: "docker exec", baseline: "bash -c true", once: cli("docker", "exec", ctr, "true")})
	}
	// In-process: the Go client against a bare spawn from this process.
	c, err := env.hostClient(ctx)
	if err != nil {
		return nil, err
	}
	ways = append(ways,
		&way{name: "bare spawn (Go)", once: func() (time.Duration, error) {
			start := time.Now()
			err := exec.Command("bash", "-c", "true").Run()
			return time.Since(start), err
		}},
		&way{name: "client.Exec (Go, host)", baseline: "bare spawn (Go)", goal: 1.3, once: func() (time.Duration, error) {
			start := time.Now()
			res, err := c.Exec(ctx, "true")
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return time.Since(start), err
		}},
	)
	// Issue 31: what runbox serve adds to an exec, at most 1 ms.
	if sv, err := startServe(ctx, cfg); err != nil {
		log.Printf("no runbox serve, its row is left out: %v", err)
	} else {
		defer sv.stop(ctx)
		ways = append(ways, &way{name: "client.Exec through serve (Go, host)", baseline: "client.Exec (Go, host)", goalAddedMs: 1,
			once: func() (time.Duration, error) {
				start := time.Now()
				res, err := sv.c.Exec(ctx, "true")
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
				return time.Since(start), err
			}})
	}
	perRound := 5
	if cfg.quick {
		perRound = 3
	}
	// Warm up: page cache, the daemon's first exec.
	for _, w := range ways {
		if _, err := w.once(); err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
	}
	for range cfg.rounds {
		for _, w := range ways {
			var xs []float64
			for range perRound {
				d, err := w.once()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", w.name, err)
				}
				xs = append(xs, ms(d))
			}
			w.perRound = append(w.perRound, xs)
		}
	}
	return latencyReport(ways, cfg.rounds, perRound), nil
}

// latencyReport summarises ways measured round by round: each row's
// samples, and its ratio to its baseline (the median of each round's ratio
// of medians).
func latencyReport(ways []*way, rounds, perRound int) *LatencyReport {
	rep := &LatencyReport{Rounds: rounds, PerRound: perRound}
	byName := map[string]*way{}
	for _, w := range ways {
		byName[w.name] = w
	}
	for _, w := range ways {
		lw := LatencyWay{Name: w.name, Baseline: w.baseline, Goal: w.goal, GoalAddedMs: w.goalAddedMs}
		for _, xs := range w.perRound {
			lw.Samples = append(lw.Samples, xs...)
		}
		lw.Stat = stat(lw.Samples)
		if b := byName[w.baseline]; b != nil {
			var ratios, added []float64
			for i := range w.perRound {
				m, bm := stat(w.perRound[i]).Median, stat(b.perRound[i]).Median
				ratios = append(ratios, m/bm)
				added = append(added, m-bm)
			}
			r := stat(ratios)
			lw.Ratio = &r
			if w.goalAddedMs > 0 {
				a := stat(added)
				lw.AddedMs = &a
			}
		}
		rep.Ways = append(rep.Ways, lw)
	}
	return rep
}
