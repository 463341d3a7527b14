package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/kubernetes"
)

// cliRun runs the real runbox binaries against the test cluster with a
// runbox home of their own.
type cliRun struct {
	t     testing.TB
	bin   string
	home  string
	extra []string // more environment, per call
}

func (c *cliRun) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, "runbox"), args...)
	cmd.Env = append(append(os.Environ(), "RUNBOX_HOME="+c.home, kubernetes.RunboxdImageEnv+"="+runboxdImage), c.extra...)
	return cmd
}

// run runs runbox with args and returns its status, stdout and stderr.
func (c *cliRun) run(args ...string) (int, string, string) {
	c.t.Helper()
	cmd := c.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("runbox %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// countIn counts the pod's live processes whose command line holds s.
func countIn(t testing.TB, sb runbox.Sandbox, s string) int {
	t.Helper()
	n := 0
	for _, p := range podProcs(t, sb) {
		if strings.Contains(p.args, s) && p.state != 'Z' && p.state != 'X' {
			n++
		}
	}
	return n
}

// waitCount waits until countIn is want (bounded).
func waitCount(t testing.TB, sb runbox.Sandbox, s string, want int, what string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		n := countIn(t, sb, s)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d processes in the pod run %q; want %d", what, n, s, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// muxProxy is what the endpoint's exec stream runs in the pod.
const muxProxy = "runboxd proxy --mux"

// TestEndpoint drives a kubernetes sandbox's persistent endpoint through
// the real CLI: after the first exec (runbox-full, which writes the local
// record) every exec goes through one endpoint and one exec stream in the
// pod (one `runboxd proxy --mux`, whatever the number of execs), with
// exact exit codes and output; a cancel through it kills the command's
// processes; a killed endpoint leaves a stale socket the next exec
// replaces (and its stream in the pod ends); it exits when idle; endpoints
// turned off start none; a removed sandbox stops it and is "no such
// sandbox"; a pod deleted behind runbox's back stops it and the next exec
// says the sandbox is gone or lost, never a bare failure.
func TestEndpoint(t *testing.T) {
	needCluster(t)
	c := &cliRun{t: t, bin: buildCLI(t), home: shortHome(t), extra: []string{endpoint.IdleEnv + "=5m"}}
	p := newProvider(t)
	up := func(name string) (string, runbox.Sandbox) {
		t.Helper()
		code, stdout, stderr := c.run("up", "--provider", "kubernetes", "--image", testImage, "--name", name)
		if code != 0 {
			t.Fatalf("up: %d %s", code, stderr)
		}
		id := strings.TrimSpace(stdout)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb, err := p.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sock, err := endpoint.Socket(c.home, "kubernetes", id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if pid := providertest.EndpointPid(t, sock); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p.Remove(ctx, sb, true)
		})
		return id, sb
	}
	id, sb := up("kep")
	sock, _ := endpoint.Socket(c.home, "kubernetes", id)
	exec3 := func(what string) {
		t.Helper()
		for i, key := range []string{"kep", id, "kep"} {
			code, stdout, stderr := c.run("exec", key, "--", "echo hi; exit 3")
			if code != 3 || stdout != "hi\n" {
				t.Fatalf("%s: exec %d: status %d, %q %q", what, i, code, stdout, stderr)
			}
		}
	}

	exec3("first use")
	for path, want := range map[string]os.FileMode{
		filepath.Join(c.home, "kubernetes", id, "secret"): 0o600, filepath.Join(c.home, "kubernetes", id): 0o700,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Fatalf("local record %s: %v; want mode %v", path, err, want)
		}
	}
	pid := providertest.EndpointPid(t, sock)
	if pid == 0 {
		t.Fatal("no endpoint accepts on", sock)
	}
	for path, want := range map[string]os.FileMode{sock: 0o600, filepath.Dir(sock): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v; want mode %v", path, err, want)
		}
	}
	exec3("through the endpoint")
	if n := countIn(t, sb, muxProxy); n != 1 {
		t.Errorf("%d %q in the pod after 6 execs; want 1 (the endpoint's one exec stream)", n, muxProxy)
	}
	if countIn(t, sb, "runboxd proxy --socket") != 0 {
		t.Errorf("a per-connection runboxd proxy runs in the pod: the execs did not go through the endpoint")
	}
	if p2 := providertest.EndpointPid(t, sock); p2 != pid {
		t.Errorf("endpoint pid %d after more execs; want the same %d", p2, pid)
	}

	// Exact output and status through it: a megabyte on stdout, a line on
	// stderr.
	code, stdout, stderr := c.run("exec", "kep", "--", "head -c 1048576 /dev/zero | tr '\\0' x; echo oops >&2; exit 7")
	if code != 7 || len(stdout) != 1<<20 || strings.Trim(stdout, "x") != "" || stderr != "oops\n" {
		t.Errorf("exec with output: status %d, %d bytes of stdout, stderr %q; want 7, 1 MiB of x, \"oops\\n\"", code, len(stdout), stderr)
	}

	// A cancel (SIGINT to runbox) through the endpoint kills the
	// command's processes in the pod.
	// (The shell's own command line must not match "sleep 424".)
	cmd := c.cmd("exec", "kep", "--", "n=424; sleep ${n}2 & sleep ${n}3; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitCount(t, sb, "sleep 424", 2, "the command's processes")
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err == nil {
		t.Errorf("a cancelled exec exited 0")
	}
	waitCount(t, sb, "sleep 424", 0, "after the cancel")

	// Killed: the socket file stays (stale); the next exec starts another
	// endpoint, and the old one's stream in the pod ends.
	syscall.Kill(pid, syscall.SIGKILL)
	providertest.WaitGone(t, pid, "SIGKILL")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the killed endpoint's socket: %v (the test wants it stale)", err)
	}
	exec3("after the endpoint was killed")
	pid2 := providertest.EndpointPid(t, sock)
	if pid2 == 0 || pid2 == pid {
		t.Errorf("endpoint after a kill: pid %d (was %d)", pid2, pid)
	}
	waitCount(t, sb, muxProxy, 1, "after the endpoint was killed and replaced")

	// Idle: an endpoint with a short idle time exits and removes its
	// socket; its stream in the pod ends.
	syscall.Kill(pid2, syscall.SIGKILL)
	providertest.WaitGone(t, pid2, "SIGKILL")
	c.extra = []string{endpoint.IdleEnv + "=1s"}
	exec3("with a 1s idle time")
	pid3 := providertest.EndpointPid(t, sock)
	if pid3 == 0 {
		t.Fatal("no endpoint after exec")
	}
	providertest.WaitGone(t, pid3, "idle")
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after the idle exit: %v; want it removed", err)
	}
	waitCount(t, sb, muxProxy, 0, "after the idle exit")

	// Off: no endpoint starts, and the exec works.
	c.extra = []string{endpoint.IdleEnv + "=0"}
	exec3("with endpoints off")
	if p := providertest.EndpointPid(t, sock); p != 0 {
		t.Errorf("endpoint pid %d with %s=0; want none", p, endpoint.IdleEnv)
	}
	c.extra = []string{endpoint.IdleEnv + "=5m"}

	// Removed: the endpoint exits; exec says no such sandbox.
	exec3("before rm")
	pid4 := providertest.EndpointPid(t, sock)
	if pid4 == 0 {
		t.Fatal("no endpoint before rm")
	}
	if code, _, stderr := c.run("rm", "-f", "kep"); code != 0 {
		t.Fatalf("rm: %d %s", code, stderr)
	}
	providertest.WaitGone(t, pid4, "sandbox removed")
	if code, stdout, stderr := c.run("exec", id, "--", "true"); code != 125 || stdout != "" || !strings.Contains(stderr, "no such sandbox") {
		t.Errorf("exec after rm: status %d, %q %q; want 125, no such sandbox", code, stdout, stderr)
	}

	// The pod deleted behind runbox's back: the endpoint sees it go and
	// exits; the next exec says so.
	id2, sb2 := up("kep2")
	sock2, _ := endpoint.Socket(c.home, "kubernetes", id2)
	for range 2 {
		if code, stdout, stderr := c.run("exec", "kep2", "--", "echo hi"); code != 0 || stdout != "hi\n" {
			t.Fatalf("exec kep2: %d %q %q", code, stdout, stderr)
		}
	}
	pid5 := providertest.EndpointPid(t, sock2)
	if pid5 == 0 {
		t.Fatal("no endpoint for kep2")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zero := int64(0)
	if err := testClient(t).CoreV1().Pods(sb2.Detail["namespace"]).Delete(ctx, sb2.Detail["pod"], metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	providertest.WaitGone(t, pid5, "pod deleted")
	code, stdout, stderr = c.run("exec", "kep2", "--", "echo hi")
	if code != 125 || stdout != "" || !(strings.Contains(stderr, "no such sandbox") || strings.Contains(stderr, "sandbox lost")) {
		t.Errorf("exec after the pod was deleted: status %d, %q %q; want 125, no such sandbox or sandbox lost", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(c.home, "kubernetes", id2)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("local record of a deleted pod: %v; want it removed", err)
	}
}
