package docker_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/providertest"
)

// Behaviours of the docker provider that docs/providers.md and docs/cli.md
// promise, tested by their effect (issue 20).

// throttled reads the container's CFS throttling count from its cpu cgroup
// (the kernel's accounting, cgroup v1 or v2), from inside the container.
func throttled(t *testing.T, c *rbclient.Client) int64 {
	t.Helper()
	res := run(t, c, "cat /sys/fs/cgroup/cpu/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpu.stat")
	for line := range strings.Lines(string(res.Stdout)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "nr_throttled "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("cpu.stat %q: %v", res.Stdout, err)
			}
			return n
		}
	}
	t.Fatalf("no nr_throttled in the container's cpu.stat: %s, stderr %q", res.Stdout, res.Stderr)
	return 0
}

// TestCPULimitEffect: --cpus is a CFS quota the container's commands are
// held to: busy loops that want more than half a CPU get throttled by the
// kernel. The test polls the throttling count against a generous deadline
// (on a loaded machine the loops may get less than their quota for a
// while); without a quota it never moves.
func TestCPULimitEffect(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	sb := create(t, p, runbox.SandboxSpec{CPUs: 0.5})
	c := dial(t, p, sb)
	before := throttled(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Four busy loops: more than the quota even where each gets a slice
	// of a loaded machine.
	loops, err := c.Start(ctx, "for i in 1 2 3 4; do sh -c 'while :; do :; done' & done; wait", rbclient.WithTimeout(90*time.Second), rbclient.WithGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := loops.Cancel(ctx); err != nil {
			t.Errorf("cancel the loops: %v", err)
		}
		if _, err := loops.Wait(ctx); err != nil {
			t.Errorf("wait for the loops: %v", err)
		}
	}()
	var after int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if after = throttled(t, c); after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("busy loops under --cpus 0.5 were never throttled in a minute (nr_throttled %d, %d before): the quota is not in effect", after, before)
		}
	}
	t.Logf("nr_throttled %d -> %d", before, after)
}

// cliHome points the in-process CLI at a fresh home and this package's
// runboxd.
func cliHome(t *testing.T) {
	t.Helper()
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "rbxc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("RUNBOX_HOME", home)
	t.Setenv("RUNBOX_RUNBOXD", bin)
}

// cliUp runs `runbox up --provider docker` with args and removes the
// sandbox when the test ends.
func cliUp(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, append([]string{"up", "--provider", "docker", "--image", testImage}, args...)...)
	if code != 0 {
		t.Fatalf("up %q: status %d: %s", args, code, stderr)
	}
	id := strings.TrimSpace(stdout)
	t.Cleanup(func() {
		if code, _, stderr := runCLI(t, "rm", "-f", id); code != 0 {
			t.Errorf("cleanup: rm -f %s: %s", id, stderr)
		}
	})
	return id
}

// proxies counts, from inside the sandbox, the `runboxd proxy` processes:
// the docker exec that carries the stream to runboxd in exec-stream mode.
const proxies = `ps -o args | grep -c '^/.runbox/runboxd prox[y]' || true`

// TestCLIExecStream: with RUNBOX_DOCKER_STREAM=exec the CLI reaches runboxd
// through `docker exec runboxd proxy` (the command sees that proxy running
// while it runs), and without it over the bind-mounted socket (no proxy);
// output and exit status are the same either way. The socket goes first:
// a proxy's process can outlive the exec it carried by a moment (the
// engine ends it after the CLI has gone), and the socket's count of zero
// would then see it.
func TestCLIExecStream(t *testing.T) {
	needEngine(t)
	cliHome(t)
	id := cliUp(t)
	for _, tc := range []struct {
		stream, want string
	}{{"", "0\n"}, {"exec", "1\n"}} {
		t.Setenv("RUNBOX_DOCKER_STREAM", tc.stream)
		code, stdout, stderr := runCLI(t, "exec", id, "--", proxies+"; exit 3")
		if code != 3 || stdout != tc.want {
			t.Errorf("RUNBOX_DOCKER_STREAM=%q: exec status %d, stdout %q (runboxd proxies), stderr %q; want 3 and %q",
				tc.stream, code, stdout, stderr, tc.want)
		}
	}
}

// TestCLINetworkNamed: --network takes a network the engine knows besides
// none and host: here another container's network namespace
// (container:ID), which the sandbox then shares — it reaches a listener on
// that container's loopback.
func TestCLINetworkNamed(t *testing.T) {
	needEngine(t)
	cliHome(t)
	server := cliUp(t, "--name", "netsrv-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	port := strconv.Itoa(20000 + int(time.Now().UnixNano()%40000))
	token := "shared-net-" + port
	code, _, stderr := runCLI(t, "exec", server, "--", "mkdir -p /tmp/www && echo "+token+" > /tmp/www/index.html && httpd -p 127.0.0.1:"+port+" -h /tmp/www")
	if code != 0 {
		t.Fatalf("start httpd in %s: status %d: %s", server, code, stderr)
	}
	code, stdout, stderr := runCLI(t, "inspect", server)
	if code != 0 {
		t.Fatalf("inspect %s: %s", server, stderr)
	}
	ctr := between(stdout, `"container": "`, `"`)
	if ctr == "" {
		t.Fatalf("inspect %s names no container:\n%s", server, stdout)
	}
	client := cliUp(t, "--network", "container:"+ctr)
	fetch := "i=0; until wget -qO- http://127.0.0.1:" + port + "/index.html 2>/dev/null; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done"
	if code, stdout, stderr := runCLI(t, "exec", client, "--", fetch); code != 0 || stdout != token+"\n" {
		t.Errorf("--network container:%.12s: fetching the other container's loopback listener: status %d, %q, %q; want %q", ctr, code, stdout, stderr, token)
	}
	// The default (none) has a loopback of its own: the listener is not there.
	alone := cliUp(t)
	if code, _, _ := runCLI(t, "exec", alone, "--", "wget -qO- -T 5 http://127.0.0.1:"+port+"/index.html"); code == 0 {
		t.Errorf("a sandbox with the default network reached the other container's loopback listener")
	}
	if code, stdout, stderr := runCLI(t, "up", "--provider", "docker", "--image", testImage, "--network", "no-such-network-runbox"); code != cli.ExitStatusFailure || stderr == "" {
		if id := strings.TrimSpace(stdout); code == 0 && id != "" {
			runCLI(t, "rm", "-f", id)
		}
		t.Errorf("up --network no-such-network-runbox: status %d, stderr %q; want 125 and the engine's reason", code, stderr)
	}
}

// between returns the text of s between the first before and the next
// after, or "".
func between(s, before, after string) string {
	_, rest, ok := strings.Cut(s, before)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, after)
	return v
}
