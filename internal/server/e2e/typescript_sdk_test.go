package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// typescriptSDK returns node and the TypeScript SDK's directory, built
// (tsc into dist/). It fails when RUNBOX_REQUIRE_NODE=1 and node or the
// SDK's packages (npm ci in sdk/typescript) are missing, and skips
// otherwise.
func typescriptSDK(t testing.TB) (node, dir string) {
	t.Helper()
	node = need(t, "node", "RUNBOX_REQUIRE_NODE", "install Node.js 20+ and run npm ci in sdk/typescript")
	dir = filepath.Join(repoRoot(t), "sdk", "typescript")
	tsc := filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_NODE") == "1" {
			t.Fatalf("%s: %v (run npm ci in %s)", tsc, err, dir)
		}
		t.Skipf("%s missing: run npm ci in %s", tsc, dir)
	}
	build := exec.Command(node, tsc, "-p", ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	return node, dir
}

// TestTypeScriptSDK runs the TypeScript SDK's tests (sdk/typescript/test,
// node --test) against a real runbox serve, with a token made by runbox
// token create: exit codes, stdout and stderr apart, a timeout and the
// command after it, descendants gone, streaming, stdin, signals, files,
// errors by class, and re-attach after a cut connection.
func TestTypeScriptSDK(t *testing.T) {
	node, dir := typescriptSDK(t)
	sp := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The files by name: node 20 takes a directory, later ones globs.
	files, _ := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if len(files) == 0 {
		t.Fatalf("no test files in %s/test", dir)
	}
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-concurrency=1"}, files...)...)
	cmd.Dir = dir
	// RUNBOX_TEST_HOME: where the host provider records each sandbox's
	// runboxd pid, for the test that kills one.
	cmd.Env = append(os.Environ(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+sp.token("ts"), "RUNBOX_TEST_HOME="+sp.home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test sdk/typescript/test: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "# pass") || strings.HasPrefix(l, "# fail") || strings.HasPrefix(l, "# skipped") {
			t.Log(l)
		}
	}
	if strings.Contains(string(out), "# pass 0") {
		t.Fatalf("node --test ran no test:\n%s", out)
	}
}

// BenchmarkTypeScriptSDKRoundTrip measures run("true") on a host sandbox through
// the TypeScript SDK (sdk/typescript/bench/run-true.mjs, one long-lived
// node process) beside the Go client's SandboxService.Run on the same
// server and sandbox, interleaved in short rounds so the machine's load
// hits both alike; it logs the medians and the per-round ratio (docs/performance.md).
// It does its own rounds, so it runs once:
//
//	go test -run '^$' -bench '^BenchmarkTypeScriptSDKRoundTrip$' -benchtime 1x -v ./internal/server/e2e/
func BenchmarkTypeScriptSDKRoundTrip(b *testing.B) {
	t := b // its helpers take testing.TB; the measurement runs once, whatever b.N
	b.StopTimer()
	const rounds, calls = 20, 25
	node, dir := typescriptSDK(t)
	sp := startServe(t)
	ctx := ctxT(t)
	tok := sp.token("bench")
	srv, err := client.NewServer(sp.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, node, "bench/run-true.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+tok, "RUNBOX_SANDBOX="+sb.ID)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	if _, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	var allGo, allTS, ratios []float64
	for r := 0; r < rounds; r++ {
		goUS := make([]float64, 0, calls)
		for i := 0; i < calls; i++ {
			t0 := time.Now()
			res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true"})
			goUS = append(goUS, float64(time.Since(t0).Microseconds()))
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("go client: %v %+v", err, res)
			}
		}
		fmt.Fprintf(stdin, "%d\n", calls)
		if !lines.Scan() {
			t.Fatalf("node bench ended: %v", lines.Err())
		}
		var tsUS []float64
		if err := json.Unmarshal(lines.Bytes(), &tsUS); err != nil || len(tsUS) != calls {
			t.Fatalf("node bench printed %q: %v", lines.Text(), err)
		}
		allGo, allTS = append(allGo, goUS...), append(allTS, tsUS...)
		ratios = append(ratios, sdkQuantile(tsUS, 0.5)/sdkQuantile(goUS, 0.5))
	}
	t.Logf("%d rounds of %d calls each, interleaved: run(\"true\") round trip, median (p25 - p75)", rounds, calls)
	for _, c := range []struct {
		name string
		us   []float64
	}{{"go client (SandboxService.Run)", allGo}, {"typescript SDK (sb.run)", allTS}} {
		t.Logf("  %-32s %.2f ms (%.2f - %.2f)", c.name, sdkQuantile(c.us, 0.5)/1000, sdkQuantile(c.us, 0.25)/1000, sdkQuantile(c.us, 0.75)/1000)
	}
	t.Logf("  per-round ratio typescript/go: median %.2f, range %.2f - %.2f", sdkQuantile(ratios, 0.5), sdkQuantile(ratios, 0), sdkQuantile(ratios, 1))
}

// sdkQuantile returns the q-quantile of xs (0: the least, 1: the greatest;
// xs is sorted in place).
func sdkQuantile(xs []float64, q float64) float64 {
	sort.Float64s(xs)
	return xs[int(q*float64(len(xs)-1))]
}
