package providertest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// RunboxdEnv names the environment variable that points providers (and this
// package) at a runboxd binary.
const RunboxdEnv = "RUNBOX_RUNBOXD"

var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// BuildRunboxd builds ./cmd/runboxd of this module once per test binary, as
// the static binary providers ship (CGO_ENABLED=0), into a temporary
// directory, and returns its path. When $RUNBOX_RUNBOXD is already set it
// returns that instead, so CI can test a prebuilt binary. Call
// [RemoveBuild] when the tests are done.
func BuildRunboxd() (string, error) {
	build.once.Do(func() {
		if p := os.Getenv(RunboxdEnv); p != "" {
			build.path = p
			return
		}
		build.dir, build.err = os.MkdirTemp("", "runboxd-build-")
		if build.err != nil {
			build.err = fmt.Errorf("build runboxd: %w", build.err)
			return
		}
		build.path = filepath.Join(build.dir, "runboxd")
		// `go test` puts the toolchain that runs the tests first in PATH, so
		// "go" builds with the same toolchain.
		cmd := exec.Command("go", "build", "-o", build.path, "github.com/runbox/runbox/cmd/runboxd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			build.err = fmt.Errorf("build runboxd: %w\n%s", err, strings.TrimSpace(out.String()))
		}
	})
	return build.path, build.err
}

// RemoveBuild removes the binary BuildRunboxd built, if any.
func RemoveBuild() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// Main is a TestMain for provider packages: it builds runboxd, exports its
// path as $RUNBOX_RUNBOXD for the provider under test, runs the tests, and
// then fails the binary if any goroutine leaked (goleak).
func Main(m *testing.M) {
	os.Exit(mainCode(m))
}

// MainIgnoring is Main for a provider whose client library keeps
// goroutines of its own for the life of the process (client-go's log
// flusher, say): goleak ignores those named by opts.
func MainIgnoring(m *testing.M, opts ...goleak.Option) {
	os.Exit(mainCode(m, opts...))
}

func mainCode(m *testing.M, leakOpts ...goleak.Option) int {
	if attackerMain() {
		return 0
	}
	defer RemoveBuild()
	path, err := BuildRunboxd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := os.Setenv(RunboxdEnv, path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(leakOpts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	return code
}

// BuildForAnyUser builds static runbox, runbox-full, runbox-server and runboxd binaries into a fresh
// directory every user can read and search (the usual build directories are
// private to the user running the tests), for a test that runs the CLI as
// another user. It returns the directory, removed when t ends.
func BuildForAnyUser(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "runbox-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"runbox", "runbox-full", "runbox-server", "runboxd"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "github.com/runbox/runbox/cmd/"+pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}
