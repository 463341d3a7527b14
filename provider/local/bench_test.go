package local_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
)

// The lifecycle benchmarks measure what a sandbox costs to get and to give
// back: create until the first exec (`true`) has returned, then remove. The
// host provider (a bare runboxd process, no namespaces) is the baseline,
// measured in the same run:
//
//	go test -run '^$' -bench Lifecycle -benchtime 50x ./provider/local/
//
// docs/performance.md records the figures. create-ms and rm-ms split each
// iteration in two.

// BenchmarkLifecycleLocal is a local sandbox: namespaces, overlay root,
// cgroups, runboxd as PID 1.
func BenchmarkLifecycleLocal(b *testing.B) {
	benchLifecycle(b, newProvider(b), runbox.SandboxSpec{}, false)
}

// BenchmarkLifecycleLocalNoDisk is a local sandbox without its disk bound
// (--disk 0): the baseline for what making, mounting and releasing the
// sandbox's own filesystem costs.
//
//	go test -run '^$' -bench 'LifecycleLocal$|LifecycleLocalNoDisk' -benchtime 30x -count 3 ./provider/local/
func BenchmarkLifecycleLocalNoDisk(b *testing.B) {
	benchLifecycle(b, newProvider(b), runbox.SandboxSpec{Disk: local.Unlimited}, false)
}

// BenchmarkLifecycleLocalHostRoot is a local sandbox whose root is the
// host's root (--host-root: no user namespace, no id-mapped trees): the
// baseline for what the mapping costs at create.
func BenchmarkLifecycleLocalHostRoot(b *testing.B) {
	benchLifecycle(b, newProvider(b), runbox.SandboxSpec{HostRoot: true}, false)
}

// BenchmarkExecTrueLocal is Exec("true") in a default (mapped) local
// sandbox; BenchmarkExecTrueLocalHostRoot, in one with --host-root, is its
// baseline: what the mapping, the seccomp filter and no_new_privs cost per
// exec.
//
//	go test -run '^$' -bench 'ExecTrueLocal' -count 5 ./provider/local/
func BenchmarkExecTrueLocal(b *testing.B) { benchExecLocal(b, runbox.SandboxSpec{}) }

// BenchmarkExecTrueLocalHostRoot is the baseline of BenchmarkExecTrueLocal.
func BenchmarkExecTrueLocalHostRoot(b *testing.B) {
	benchExecLocal(b, runbox.SandboxSpec{HostRoot: true})
}

func benchExecLocal(b *testing.B, spec runbox.SandboxSpec) {
	_, c := create(b, newProvider(b), spec)
	ctx := context.Background()
	for b.Loop() {
		if res, err := c.Exec(ctx, "true"); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", res, err)
		}
	}
}

// BenchmarkLifecycleLocalLimits adds memory and pids limits (cgroup v1
// directories on a hybrid host) and a network namespace.
func BenchmarkLifecycleLocalLimits(b *testing.B) {
	benchLifecycle(b, newProvider(b), runbox.SandboxSpec{Memory: 512 << 20, Pids: 512, Network: "none"}, false)
}

// BenchmarkLifecycleHost is the baseline: a host sandbox.
func BenchmarkLifecycleHost(b *testing.B) {
	p := newProvider(b)
	benchLifecycle(b, &host.Provider{Home: p.Home, Runboxd: p.Runboxd}, runbox.SandboxSpec{}, false)
}

// BenchmarkLifecycleHostClientOpen removes the host sandbox while the
// client of its first exec is still open (and idle), as an agent that
// removes its sandbox before closing its client does.
func BenchmarkLifecycleHostClientOpen(b *testing.B) {
	p := newProvider(b)
	benchLifecycle(b, &host.Provider{Home: p.Home, Runboxd: p.Runboxd}, runbox.SandboxSpec{}, true)
}

// BenchmarkLifecycleLocalClientOpen is the same on a local sandbox.
func BenchmarkLifecycleLocalClientOpen(b *testing.B) {
	benchLifecycle(b, newProvider(b), runbox.SandboxSpec{}, true)
}

// lifecycle is the part of runbox.Provider the benchmark uses.
type lifecycle interface {
	Create(context.Context, runbox.SandboxSpec) (runbox.Sandbox, error)
	Dialer(runbox.Sandbox) runbox.Dialer
	Remove(context.Context, runbox.Sandbox, bool) error
}

// benchLifecycle closes the first exec's client after the removal instead
// of before it when clientOpen.
func benchLifecycle(b *testing.B, p lifecycle, spec runbox.SandboxSpec, clientOpen bool) {
	spec.Workdir = b.TempDir()
	ctx := context.Background()
	var create, remove time.Duration
	var creates, removes []time.Duration
	for b.Loop() {
		t0 := time.Now()
		sb, err := p.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		c := client.New(p.Dialer(sb))
		if res, err := c.Exec(ctx, "true"); err != nil || res.ExitCode != 0 {
			b.Fatalf("first exec: %+v %v", res, err)
		}
		if !clientOpen {
			c.Close()
		}
		t1 := time.Now()
		if err := p.Remove(ctx, sb, false); err != nil {
			b.Fatal(err)
		}
		if clientOpen {
			c.Close()
		}
		create += t1.Sub(t0)
		remove += time.Since(t1)
		creates, removes = append(creates, t1.Sub(t0)), append(removes, time.Since(t1))
	}
	b.ReportMetric(create.Seconds()*1000/float64(b.N), "create-ms")
	b.ReportMetric(remove.Seconds()*1000/float64(b.N), "rm-ms")
	b.ReportMetric(median(creates).Seconds()*1000, "create-median-ms")
	b.ReportMetric(median(removes).Seconds()*1000, "rm-median-ms")
}

// median returns the middle of ds (sorting it).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}
