package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// BenchmarkSDKRoundTrip measures Run("true") on one host sandbox through every
// client in the same run, interleaved batch by batch so the machine's load
// hits them alike: the Go client straight to runboxd and through a real
// runbox serve (streaming and unary), and the Python SDK through the server
// (sync and runbox.aio) and in local mode (straight to runboxd). It only
// reports medians (docs/performance.md, "SDKs"); it checks no
// time. A benchmark that does its own rounds, so it runs once:
//
//	go test -run '^$' -bench '^BenchmarkSDKRoundTrip$' -benchtime 1x -v ./internal/server/e2e/
func BenchmarkSDKRoundTrip(b *testing.B) {
	t := b // its helpers take testing.TB; the measurement runs once, whatever b.N
	b.StopTimer()
	python := pythonWithPytest(t)
	sp := startServe(t)
	tok := sp.token("bench")
	srv, err := client.NewServer(sp.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	hp := &host.Provider{Home: sp.home}
	hsb, err := hp.Get(ctx, sb.Detail["provider_id"])
	if err != nil {
		t.Fatal(err)
	}
	direct := client.New(hp.Dialer(hsb))
	defer direct.Close()
	remote := srv.Sandbox(sb.ID)
	defer remote.Close()

	worker := exec.Command(python, filepath.Join(repoRoot(t), "sdk", "python", "bench", "roundtrip.py"),
		sp.url, tok, sb.ID, sp.bin, sp.home, sb.Detail["provider_id"])
	worker.Env = sp.env()
	worker.Stderr = os.Stderr
	in, err := worker.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := worker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); worker.Wait() }()
	out := bufio.NewScanner(outPipe)
	out.Buffer(nil, 1<<20)
	// Each batch answers its round trips and the client's CPU time for
	// them (the Python worker's, or this process's: the server and
	// runboxd are other processes), steadier than wall time under load.
	python1 := func(kind string, n int) ([]time.Duration, time.Duration) {
		fmt.Fprintf(in, "%s %d\n", kind, n)
		if !out.Scan() {
			t.Fatalf("python worker: no answer to %s: %v", kind, out.Err())
		}
		var ans struct {
			NS    []int64 `json:"ns"`
			CPUNS int64   `json:"cpu_ns"`
		}
		if err := json.Unmarshal(out.Bytes(), &ans); err != nil {
			t.Fatalf("python worker: %q: %v", out.Text(), err)
		}
		d := make([]time.Duration, len(ans.NS))
		for i, v := range ans.NS {
			d[i] = time.Duration(v)
		}
		return d, time.Duration(ans.CPUNS)
	}
	goBatch := func(n int, op func() (runbox.Result, error)) ([]time.Duration, time.Duration) {
		var d []time.Duration
		cpu := selfCPU(t)
		for range n {
			start := time.Now()
			res, err := op()
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%+v, %v", res, err)
			}
			d = append(d, time.Since(start))
		}
		return d, selfCPU(t) - cpu
	}
	ops := []struct {
		name string
		run  func(n int) ([]time.Duration, time.Duration)
	}{
		{"Go client, direct to runboxd", func(n int) ([]time.Duration, time.Duration) {
			return goBatch(n, func() (runbox.Result, error) { return direct.Exec(ctx, "true") })
		}},
		{"Go client, through serve (streaming)", func(n int) ([]time.Duration, time.Duration) {
			return goBatch(n, func() (runbox.Result, error) { return remote.Exec(ctx, "true") })
		}},
		{"Go client, through serve (unary Run)", func(n int) ([]time.Duration, time.Duration) {
			return goBatch(n, func() (runbox.Result, error) {
				res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true"})
				return res, err
			})
		}},
		{"Python sync, through serve", func(n int) ([]time.Duration, time.Duration) { return python1("sync", n) }},
		{"Python runbox.aio, through serve", func(n int) ([]time.Duration, time.Duration) { return python1("async", n) }},
		{"Python local mode, direct to runboxd", func(n int) ([]time.Duration, time.Duration) { return python1("local", n) }},
	}
	const rounds, batch = 20, 10
	lat := make([][]time.Duration, len(ops))
	cpu := make([]time.Duration, len(ops))
	for i := range ops { // warm up: connections, imports, caches
		ops[i].run(3)
	}
	for range rounds {
		for i, o := range ops {
			d, c := o.run(batch)
			lat[i] = append(lat[i], d...)
			cpu[i] += c
		}
	}
	for i, o := range ops {
		slices.Sort(lat[i])
		n := len(lat[i])
		t.Logf("%-40s median %6.2f ms  p90 %6.2f ms  client CPU %5.2f ms/run  (%d runs)", o.name,
			ms(lat[i][n/2]), ms(lat[i][n*9/10]), ms(cpu[i]/time.Duration(n)), n)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average: %s", b)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// selfCPU is this process's user and system CPU time so far.
func selfCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
