package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/providertest"
)

// This file's helpers run the real runbox binary, as a user or an agent
// does: its signals, its exit status, its terminal.

var runboxBin struct {
	once sync.Once
	path string
	err  error
}

// binary builds ./cmd/runbox, ./cmd/runbox-full and ./cmd/runbox-server
// into one directory once per test binary, beside the runboxd providertest
// built (removed with it), and returns runbox's path: the light binary,
// which hands what it does not run itself to runbox-full (docker, ls, ...)
// or runbox-server (serve, mcp, ...) beside it.
func binary(t *testing.T) string {
	t.Helper()
	runboxBin.once.Do(func() {
		dir := filepath.Dir(os.Getenv(providertest.RunboxdEnv))
		if !strings.HasPrefix(filepath.Base(dir), "runboxd-build-") {
			// A prebuilt runboxd (CI): build runbox in a directory of its own.
			if dir, runboxBin.err = os.MkdirTemp("", "runbox-cli-"); runboxBin.err != nil {
				return
			}
		}
		runboxBin.path = filepath.Join(dir, "runbox")
		cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/runbox/runbox/cmd/runbox", "github.com/runbox/runbox/cmd/runbox-full", "github.com/runbox/runbox/cmd/runbox-server")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			runboxBin.err = err
			runboxBin.path = string(out)
		}
	})
	if runboxBin.err != nil {
		t.Fatalf("build runbox: %v\n%s", runboxBin.err, runboxBin.path)
	}
	return runboxBin.path
}

// binCmd is the runbox binary with args, in this test's environment
// (RUNBOX_HOME, RUNBOX_PROVIDER, DOCKER_HOST from setHome).
func binCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(binary(t), args...)
}

// runBin runs the runbox binary to its end with stdin from /dev/null.
func runBin(t *testing.T, args ...string) outcome {
	t.Helper()
	cmd := binCmd(t, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run runbox %q: %v", args, err)
	}
	return outcome{code, stdout.String(), stderr.String()}
}

// waitExit waits up to bound for cmd (started) to exit, and returns its
// exit status and how long it took; it fails the test if it does not end.
func waitExit(t *testing.T, cmd *exec.Cmd, bound time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), time.Since(start)
		}
		if err != nil {
			t.Fatalf("wait for runbox: %v", err)
		}
		return 0, time.Since(start)
	case <-time.After(bound):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("runbox %q still ran %v later: it hangs", cmd.Args[1:], bound)
		return 0, 0
	}
}

// pollCount polls the machine's processes carrying marker until cond
// holds for their count or bound passes, and returns the last count.
func pollCount(t *testing.T, marker string, bound time.Duration, cond func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		n, err := providertest.ProcCount(marker)
		if err != nil {
			t.Fatal(err)
		}
		if cond(n) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// execJSON decodes exec --json output into a map.
func execJSON(t *testing.T, o outcome) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(o.stdout), &m); err != nil {
		t.Fatalf("exec --json printed %q (stderr %q): %v", o.stdout, o.stderr, err)
	}
	return m
}

// signalled sends sig to cmd's process.
func signalled(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal runbox: %v", err)
	}
}

// jsonUnmarshal decodes s into v.
func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
