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
func pythonWithPytest(t *testing.T) string {
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
// runbox serve with a token made by runbox token create.
func TestPythonSDK(t *testing.T) {
	python := pythonWithPytest(t)
	bins := binDir(t)
	sdk := filepath.Join(repoRoot(t), "sdk", "python")
	base := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
		"--basetemp", filepath.Join(base, "pytest"), "tests")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "RUNBOX_BIN_DIR="+bins, "PYTHONDONTWRITEBYTECODE=1",
		"RUNBOX_HOST=", "RUNBOX_TOKEN=", "RUNBOX_PROVIDER=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m pytest sdk/python/tests: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("pytest: %s", lines[len(lines)-1])
}
