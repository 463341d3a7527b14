package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Throughput is one way of carrying one output size: MB/s per run, and
// what it cost.
type Throughput struct {
	Way   string    `json:"way"`
	Bytes int64     `json:"bytes"`
	MBps  []float64 `json:"mb_per_s"`
	Stat  Stat      `json:"stat_mb_per_s"`
	// RatioToPipe is the median of each run's MB/s divided by the pipe
	// baseline's in the same round.
	RatioToPipe *Stat `json:"ratio_to_pipe,omitempty"`
	// Goal is the goal for RatioToPipe (at least), where it set one.
	Goal float64 `json:"goal_ratio_to_pipe,omitempty"`
	// DaemonCPU and ClientCPU are CPU seconds per GiB carried (medians).
	DaemonCPU float64 `json:"daemon_cpu_s_per_gib,omitempty"`
	ClientCPU float64 `json:"client_cpu_s_per_gib,omitempty"`
	// DaemonPeakKB and ClientPeakKB are peak resident sizes (largest run).
	DaemonPeakKB int64 `json:"daemon_peak_rss_kb,omitempty"`
	ClientPeakKB int64 `json:"client_peak_rss_kb,omitempty"`
}

type tpRun struct {
	wall                   time.Duration
	clientCPU, daemonCPU   float64
	clientPeak, daemonPeak int64
}

type tpWay struct {
	name      string
	goal      float64
	daemonPid int
	run       func(size int64) (tpRun, error)
}

func benchThroughput(ctx context.Context, cfg *config, env *sandboxes) ([]Throughput, error) {
	sizes := []int64{1 << 20, 16 << 20, 256 << 20, 2 << 30}
	rounds := map[int64]int{1 << 20: 10, 16 << 20: 5, 256 << 20: 3, 2 << 30: 2}
	if cfg.quick {
		sizes = []int64{16 << 20, 256 << 20}
		rounds = map[int64]int{16 << 20: 2, 256 << 20: 1}
	}
	head := func(n int64) string { return fmt.Sprintf("head -c %d /dev/zero", n) }
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	shell := func(script string) (tpRun, error) {
		cmd := exec.Command("bash", "-c", script)
		cmd.Stdout = devnull
		start := time.Now()
		err := cmd.Run()
		return tpRun{wall: time.Since(start)}, err
	}
	ways := []*tpWay{
		{name: "head > /dev/null", run: func(n int64) (tpRun, error) { return shell(head(n) + " >/dev/null") }},
		{name: "pipe: head | cat", run: func(n int64) (tpRun, error) { return shell(head(n) + " | cat >/dev/null") }},
	}
	runboxBin := filepath.Join(cfg.bin, "runbox")
	for _, p := range []string{"host", "local"} {
		id := env.get(p)
		if id == "" {
			continue
		}
		pid, err := env.daemonPid(id)
		if err != nil {
			return nil, err
		}
		for _, json := range []bool{false, true} {
			name := "runbox exec (" + p + ")"
			args := []string{"exec", id, "--"}
			if json {
				name = "runbox exec --json (" + p + ")"
				args = []string{"exec", "--json", id, "--"}
			}
			// Issue 31: the CLI carries at least 0.45× what a pipe does.
			ways = append(ways, &tpWay{name: name, goal: 0.45, daemonPid: pid, run: func(n int64) (tpRun, error) {
				cmd := exec.Command(runboxBin, append(args, head(n))...)
				cmd.Stdout = devnull
				resetPeakRSS(pid)
				d0 := cpuSeconds(pid)
				start := time.Now()
				err := cmd.Run()
				r := tpRun{wall: time.Since(start), daemonCPU: cpuSeconds(pid) - d0, daemonPeak: statusKB(pid, "VmHWM")}
				if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
					r.clientCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
					r.clientPeak = ru.Maxrss
				}
				return r, err
			}})
		}
	}
	// The Go client with no spill file: what the transport carries when
	// nothing is written to disk.
	if id := env.get("host"); id != "" {
		c, err := env.hostClient(ctx)
		if err != nil {
			return nil, err
		}
		pid, _ := env.daemonPid(id)
		ways = append(ways, &tpWay{name: "client.Exec, no spill (Go, host)", daemonPid: pid, run: func(n int64) (tpRun, error) {
			resetPeakRSS(pid)
			d0, c0 := cpuSeconds(pid), selfCPU()
			start := time.Now()
			res, err := c.Exec(ctx, head(n), client.WithStdout(io.Discard), client.WithSpill(runbox.SpillNever))
			r := tpRun{wall: time.Since(start), daemonCPU: cpuSeconds(pid) - d0, daemonPeak: statusKB(pid, "VmHWM"),
				clientCPU: selfCPU() - c0}
			if err == nil && res.StdoutBytes != n {
				err = fmt.Errorf("carried %d bytes of %d", res.StdoutBytes, n)
			}
			return r, err
		}})
	}

	var out []Throughput
	for _, n := range sizes {
		runs := make([][]tpRun, len(ways))
		for range rounds[n] {
			for i, w := range ways {
				r, err := w.run(n)
				if err != nil {
					return nil, fmt.Errorf("%s, %d bytes: %w", w.name, n, err)
				}
				runs[i] = append(runs[i], r)
			}
		}
		for i, w := range ways {
			t := Throughput{Way: w.name, Bytes: n, Goal: w.goal}
			var dcpu, ccpu, ratios []float64
			for j, r := range runs[i] {
				mbps := float64(n) / 1e6 / r.wall.Seconds()
				t.MBps = append(t.MBps, mbps)
				ratios = append(ratios, mbps/(float64(n)/1e6/runs[1][j].wall.Seconds()))
				gib := float64(n) / (1 << 30)
				dcpu = append(dcpu, r.daemonCPU/gib)
				ccpu = append(ccpu, r.clientCPU/gib)
				t.DaemonPeakKB = max(t.DaemonPeakKB, r.daemonPeak)
				t.ClientPeakKB = max(t.ClientPeakKB, r.clientPeak)
			}
			t.Stat = stat(t.MBps)
			if i != 1 {
				r := stat(ratios)
				t.RatioToPipe = &r
			}
			if w.daemonPid != 0 {
				t.DaemonCPU = stat(dcpu).Median
				t.ClientCPU = stat(ccpu).Median
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// selfCPU returns the CPU seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
