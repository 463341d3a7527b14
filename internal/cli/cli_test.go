package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/providertest"
)

// TestMain builds runboxd once, exports it as $RUNBOX_RUNBOXD, and checks
// for leaked goroutines at the end.
func TestMain(m *testing.M) { providertest.Main(m) }

// outcome is what one in-process runbox invocation did.
type outcome struct {
	code           int
	stdout, stderr string
}

// runboxIO runs the CLI in-process with the given stdin and writers.
func runboxIO(t *testing.T, stdin string, stdout, stderr *syncBuffer, args ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return cli.Main(ctx, cli.ServerCommands{}, args, strings.NewReader(stdin), stdout, stderr)
}

// rb runs the CLI in-process with empty stdin.
func rb(t *testing.T, args ...string) outcome {
	t.Helper()
	return runboxStdin(t, "", args...)
}

// runboxStdin runs the CLI in-process with stdin.
func runboxStdin(t *testing.T, stdin string, args ...string) outcome {
	t.Helper()
	var stdout, stderr syncBuffer
	code := runboxIO(t, stdin, &stdout, &stderr, args...)
	return outcome{code, stdout.String(), stderr.String()}
}

// must runs the CLI and fails the test unless it exits 0.
func must(t *testing.T, args ...string) string {
	t.Helper()
	o := rb(t, args...)
	if o.code != 0 {
		t.Fatalf("runbox %q: exit %d, stderr %q", args, o.code, o.stderr)
	}
	return o.stdout
}

// setHome points RUNBOX_HOME at a fresh short directory (unix socket paths
// are limited to 107 bytes) and removes every sandbox left in it when the
// test ends.
//
// It also points DOCKER_HOST at a socket that does not exist, so the CLI
// sees this home's host sandboxes and nothing else: ls, and the rm -f of
// everything ls lists at the end, would otherwise reach the machine's docker
// engine and remove the containers of other tests running beside these (the
// docker provider's conformance suite, another engineer's run).
func setHome(t *testing.T) string {
	t.Helper()
	home, err := os.MkdirTemp("", "rb")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("RUNBOX_HOME", home)
	t.Setenv("DOCKER_HOST", "unix://"+home+"/no-docker-engine.sock")
	// No cluster either: with CI's KUBECONFIG, ls would list (and the
	// cleanup below remove) the pods provider/kubernetes's tests are using.
	t.Setenv("KUBECONFIG", home+"/no-kubeconfig")
	// These tests are about the CLI, on the provider with the least
	// machinery; provider/local and provider/docker test theirs.
	t.Setenv("RUNBOX_PROVIDER", "host")
	t.Cleanup(func() {
		defer os.RemoveAll(home)
		for _, sb := range lsJSON(t) {
			if o := rb(t, "rm", "-f", sb.ID); o.code != 0 {
				t.Errorf("cleanup: rm -f %s: %s", sb.ID, o.stderr)
			}
		}
	})
	return home
}

// up creates a sandbox and returns its id.
func up(t *testing.T, args ...string) string {
	t.Helper()
	out := must(t, append([]string{"up"}, args...)...)
	if !regexp.MustCompile(`^[0-9a-f]{12}\n$`).MatchString(out) {
		t.Fatalf("up printed %q; want one line with a 12-digit id", out)
	}
	return strings.TrimSpace(out)
}

type sandboxJSON struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Provider string            `json:"provider"`
	Alive    bool              `json:"alive"`
	Detail   map[string]string `json:"detail"`
}

func lsJSON(t *testing.T) []sandboxJSON {
	t.Helper()
	var sbs []sandboxJSON
	if err := json.Unmarshal([]byte(must(t, "ls", "--json")), &sbs); err != nil {
		t.Fatalf("ls --json: %v", err)
	}
	return sbs
}

// syncBuffer is a bytes.Buffer safe for concurrent use, which can announce
// its first write.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
	once    sync.Once
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		b.once.Do(func() { close(b.written) })
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
