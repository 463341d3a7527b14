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

// pythonWithPytest returns a python3 that can import pytest: $RUNBOX_PYTHON,
// python3 in PATH, or Debian's /usr/bin/python3 (where apt's python3-pytest
// lands, whatever other python3 comes first in PATH). It fails when
// RUNBOX_REQUIRE_PYTHON=1 and there is none, and skips otherwise.
func pythonWithPytest(t testing.TB) string {
	t.Helper()
	var tried []string
	for _, p := range []string{os.Getenv("RUNBOX_PYTHON"), "python3", "/usr/bin/python3"} {
		if p == "" {
			continue
		}
		path, err := exec.LookPath(p)
		if err != nil {
			tried = append(tried, p+": not found")
			continue
		}
		if out, err := exec.Command(path, "-c", "import pytest").CombinedOutput(); err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			tried = append(tried, path+": "+lines[len(lines)-1])
			continue
		}
		return path
	}
	const how = "apt-get install python3 python3-pytest (or set RUNBOX_PYTHON to a python3 with pytest)"
	if os.Getenv("RUNBOX_REQUIRE_PYTHON") == "1" {
		t.Fatalf("python3 with pytest is required (RUNBOX_REQUIRE_PYTHON=1) but not found (%s): %s", strings.Join(tried, "; "), how)
	}
	t.Skipf("no python3 with pytest (%s): %s", strings.Join(tried, "; "), how)
	return ""
}

// TestPythonSDK runs the Python SDK's tests (sdk/python/tests, pytest)
// with the binaries built here: each pytest session starts its own real
// runbox serve with a token made by runbox token create. The sync and the
// asyncio (runbox.aio) suites both run; local mode has its own test below.
func TestPythonSDK(t *testing.T) {
	runPytest(t, "--ignore", filepath.Join("tests", "test_local.py"), "tests")
}

// TestPythonSDKLocal runs the tests of the Python SDK's local mode
// (runbox.local: sandboxes made by the CLI and reached over their runboxd's
// socket with their secret), which start no server and use no token, on the
// host and local providers (local skips where this machine cannot make
// local sandboxes, unless RUNBOX_REQUIRE_LOCAL=1).
func TestPythonSDKLocal(t *testing.T) {
	runPytest(t, filepath.Join("tests", "test_local.py"))
}

// runPytest runs python3 -m pytest with args in sdk/python.
func runPytest(t testing.TB, args ...string) {
	t.Helper()
	python := pythonWithPytest(t)
	bins := binDir(t)
	sdk := filepath.Join(repoRoot(t), "sdk", "python")
	base := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
		"--basetemp", filepath.Join(base, "pytest")}, args...)...)
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "RUNBOX_BIN_DIR="+bins, "PYTHONDONTWRITEBYTECODE=1",
		"RUNBOX_HOST=", "RUNBOX_TOKEN=", "RUNBOX_PROVIDER=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m pytest %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("pytest: %s", lines[len(lines)-1])
}
