package host_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// The benchmarks below answer one question (issue 2's performance goal: an
// exec through runbox costs at most 1.3× a bare spawn) and locate the
// overhead when it is above that. Run them in one process so they share the
// machine's state:
//
//	go test -run '^$' -bench . -count 5 ./provider/host/ | benchstat -
//
// docs/performance.md records the figures.

// BenchmarkBareSpawn is the baseline: what a caller pays to run `true`
// through bash without runbox.
func BenchmarkBareSpawn(b *testing.B) {
	cpu := startCPU(b, 0)
	for b.Loop() {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// BenchmarkExecTrue is Exec("true") through the client, the daemon and its
// supervisor (its default containment: a cgroup per exec where available),
// to the result. leader-ns/op is the command's own run time on the daemon's
// clock (spawn to exit).
func BenchmarkExecTrue(b *testing.B) {
	benchExec(b, "true")
}

// BenchmarkExecTrueNoCgroup is BenchmarkExecTrue with the /proc fallback
// instead of a cgroup per exec, to show what the cgroup costs.
func BenchmarkExecTrueNoCgroup(b *testing.B) {
	benchExec(b, "true", "--cgroup=off")
}

// BenchmarkExecArgvTrue runs /bin/true as an argv, without a shell: the
// same path as BenchmarkExecTrue minus bash's own start-up.
func BenchmarkExecArgvTrue(b *testing.B) {
	c, pid := benchSandbox(b)
	ctx := context.Background()
	var leader time.Duration
	cpu := startCPU(b, pid)
	for b.Loop() {
		res, err := c.ExecArgv(ctx, []string{"true"})
		if err != nil || !res.OK() {
			b.Fatalf("exec argv true: %+v, %v", res, err)
		}
		leader += res.Duration
	}
	cpu.report(b)
	b.ReportMetric(float64(leader.Nanoseconds())/float64(b.N), "leader-ns/op")
}

// BenchmarkBareSpawnArgv is BenchmarkBareSpawn without the shell, the
// baseline for BenchmarkExecArgvTrue.
func BenchmarkBareSpawnArgv(b *testing.B) {
	cpu := startCPU(b, 0)
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// BenchmarkStartWaitTrue splits an exec of `true` at the started event:
// start-ns/op is the call until runboxd has spawned the command and said so,
// wait-ns/op the rest, until the result is back.
func BenchmarkStartWaitTrue(b *testing.B) {
	c, _ := benchSandbox(b)
	ctx := context.Background()
	var start, wait time.Duration
	for b.Loop() {
		t0 := time.Now()
		p, err := c.Start(ctx, "true")
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		res, err := p.Wait(ctx)
		if err != nil || !res.OK() {
			b.Fatalf("wait: %+v, %v", res, err)
		}
		start += t1.Sub(t0)
		wait += time.Since(t1)
	}
	b.ReportMetric(float64(start.Nanoseconds())/float64(b.N), "start-ns/op")
	b.ReportMetric(float64(wait.Nanoseconds())/float64(b.N), "wait-ns/op")
}

// BenchmarkInfo is one trivial RPC round trip on the same connection: the
// floor of any call through the client.
func BenchmarkInfo(b *testing.B) {
	c, pid := benchSandbox(b)
	ctx := context.Background()
	cpu := startCPU(b, pid)
	for b.Loop() {
		if _, err := c.Info(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

func benchExec(b *testing.B, command string, daemonArgs ...string) {
	c, pid := benchSandbox(b, daemonArgs...)
	ctx := context.Background()
	var leader time.Duration
	cpu := startCPU(b, pid)
	for b.Loop() {
		res, err := c.Exec(ctx, command)
		if err != nil || !res.OK() {
			b.Fatalf("exec %q: %+v, %v", command, res, err)
		}
		leader += res.Duration
	}
	cpu.report(b)
	b.ReportMetric(float64(leader.Nanoseconds())/float64(b.N), "leader-ns/op")
}

// benchSandbox creates a host sandbox and a client to it, warmed up with one
// exec, both removed when the benchmark ends, and returns the client and
// runboxd's pid.
func benchSandbox(b *testing.B, daemonArgs ...string) (*client.Client, int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial, id := benchDialer(b, daemonArgs...)
	c := client.New(dial, client.WithSandboxName(id))
	b.Cleanup(func() { c.Close() })
	if res, err := c.Exec(ctx, "true"); err != nil || !res.OK() {
		b.Fatalf("warm-up exec: %+v, %v", res, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return c, info.Pid
}

// benchDialer creates a host sandbox, removed when the benchmark ends, and
// returns its dialer and id.
func benchDialer(b *testing.B, daemonArgs ...string) (runbox.Dialer, string) {
	b.Helper()
	p := newProvider(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, runbox.SandboxSpec{DaemonArgs: daemonArgs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Remove(ctx, sb, true); err != nil {
			b.Error(err)
		}
	})
	return p.Dialer(sb), sb.ID
}

// cpuUse is CPU time spent so far by this process (the caller: test binary
// and client), by its reaped children, and by a runboxd and its reaped
// children.
type cpuUse struct {
	daemonPid                                int
	caller, children, daemon, daemonChildren time.Duration
}

// startCPU reads the CPU counters before a benchmark loop; daemonPid 0
// means there is no daemon.
func startCPU(b *testing.B, daemonPid int) cpuUse {
	b.Helper()
	u := cpuUse{daemonPid: daemonPid}
	u.read(b)
	return u
}

func (u *cpuUse) read(b *testing.B) {
	var self, kids syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids); err != nil {
		b.Fatal(err)
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	u.caller = tv(self.Utime) + tv(self.Stime)
	u.children = tv(kids.Utime) + tv(kids.Stime)
	if u.daemonPid == 0 {
		return
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", u.daemonPid))
	if err != nil {
		b.Fatal(err)
	}
	// After the command name: state is field 3, utime..cstime 14..17, in
	// clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
	tick := func(i int) time.Duration {
		n, err := strconv.ParseInt(f[i-3], 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(n) * 10 * time.Millisecond
	}
	u.daemon = tick(14) + tick(15)
	u.daemonChildren = tick(16) + tick(17)
}

// report adds the CPU time per op each party spent since startCPU.
func (u cpuUse) report(b *testing.B) {
	b.Helper()
	now := cpuUse{daemonPid: u.daemonPid}
	now.read(b)
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(now.caller-u.caller), "caller-cpu-ns/op")
	if u.daemonPid == 0 {
		b.ReportMetric(per(now.children-u.children), "child-cpu-ns/op")
		return
	}
	b.ReportMetric(per(now.daemon-u.daemon), "daemon-cpu-ns/op")
	if d := now.daemonChildren - u.daemonChildren; d > 0 {
		b.ReportMetric(per(d), "child-cpu-ns/op")
	}
}
