package local_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/local"
)

// localSandboxes says whether this machine can make local sandboxes;
// RUNBOX_REQUIRE_LOCAL=1 (CI) makes "it cannot" a failure.
var localSandboxes *providertest.Requirement

// TestMain builds runboxd once, checks that a local sandbox can be made
// here, and runs the tests, failing the run if a goroutine leaked.
func TestMain(m *testing.M) {
	if probeMain() || mountAttackMain() || snapshotterMain() {
		return
	}
	if os.Getenv("RUNBOX_PROVIDERTEST_ATTACKER") == "1" {
		providertest.Main(m) // an attacker inside a sandbox: no sandbox of its own
		return
	}
	localSandboxes = providertest.CheckRequirement("provider/local", "RUNBOX_REQUIRE_LOCAL", probe)
	providertest.Main(m)
}

// probe makes and removes one sandbox; it returns why that failed, or "".
func probe() string {
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		return err.Error()
	}
	home, err := os.MkdirTemp("", "rbl")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(home)
	p := &local.Provider{Home: home, Runboxd: bin}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, err := os.MkdirTemp("", "rblws")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(ws)
	sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: ws})
	if err != nil {
		return fmt.Sprintf("cannot create a local sandbox here: %v", err)
	}
	if err := p.Remove(ctx, sb, true); err != nil {
		return fmt.Sprintf("cannot remove a local sandbox here: %v", err)
	}
	return ""
}

// needLocal skips t when this machine cannot make local sandboxes.
func needLocal(t testing.TB) {
	t.Helper()
	localSandboxes.Need(t)
}

// newProvider returns a local provider with its own short home (unix socket
// paths must fit in 107 bytes), removed when the test ends.
func newProvider(t testing.TB) *local.Provider {
	t.Helper()
	needLocal(t)
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "rbl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return &local.Provider{Home: home, Runboxd: bin}
}

// create makes a sandbox (workspace: a fresh directory unless the spec
// names one) removed when the test ends, and a client for it.
func create(t testing.TB, p *local.Provider, spec runbox.SandboxSpec) (runbox.Sandbox, *client.Client) {
	t.Helper()
	if spec.Workdir == "" {
		spec.Workdir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Remove reports what it could not clean up (a cgroup, the state
		// directory): a leak is a failure, not silence.
		if err := p.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("cleanup: remove %s: %v", sb.ID, err)
		}
	})
	return sb, c
}

// run runs command in the sandbox and fails t unless it exits 0.
func run(t testing.TB, c *client.Client, command string, opts ...client.ExecOption) string {
	t.Helper()
	res := exec(t, c, command, opts...)
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d, stderr %q", command, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// exec runs command in the sandbox and returns its result.
func exec(t testing.TB, c *client.Client, command string, opts ...client.ExecOption) runbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, command, opts...)
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	return res
}

// nobody is the unprivileged host user the rootless tests run the CLI as.
const nobody = 65534

// nobodyDirs builds the binaries where any user can run them (dir) and
// makes a runbox home and a workspace in dir owned by nobody.
func nobodyDirs(t *testing.T) (dir, home, ws string) {
	t.Helper()
	dir = providertest.BuildForAnyUser(t)
	home, ws = filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for _, d := range []string{home, ws} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	return dir, home, ws
}
