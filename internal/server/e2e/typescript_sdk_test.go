package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// typescriptSDK returns node and the TypeScript SDK's directory, built
// (tsc into dist/). It fails when RUNBOX_REQUIRE_NODE=1 and node or the
// SDK's packages (npm ci in sdk/typescript) are missing, and skips
// otherwise.
func typescriptSDK(t *testing.T) (node, dir string) {
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
	cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUNBOX_HOST="+sp.url, "RUNBOX_TOKEN="+sp.token("ts"))
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
