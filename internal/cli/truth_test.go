package cli_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/host"
)

// These tests drive the real runbox binary through what issue 14 found a
// new user meeting: each checks an effect (a process gone, a status, a
// field equal to what the command printed), not a string runbox built.

// hangBound is how long a command that must end is given before the test
// calls it a hang: generous for a loaded machine, and far below forever.
const hangBound = 30 * time.Second

// marker returns a sleep command unique to one test ("sleep 3136NNNNNN").
func marker(t *testing.T) string {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("sleep 3136%06d", n.Int64())
}

// localNeeded skips (or, with RUNBOX_REQUIRE_LOCAL=1, fails) a test that
// needs the local provider when this machine cannot make local sandboxes.
func localNeeded(t *testing.T) {
	t.Helper()
	o := rb(t, "up", "--provider", "local", "--name", "probe-local")
	if o.code == 0 {
		must(t, "rm", "probe-local")
		return
	}
	if os.Getenv("RUNBOX_REQUIRE_LOCAL") == "1" {
		t.Fatalf("RUNBOX_REQUIRE_LOCAL=1 but a local sandbox cannot be made here: %s", o.stderr)
	}
	t.Skipf("a local sandbox cannot be made here (%s); run as root, or set RUNBOX_REQUIRE_LOCAL=1 to make this a failure", strings.TrimSpace(o.stderr))
}

// Item 1: runbox sh with a stdin at end of file ends, and SIGTERM ends it
// at once (a hangup), not after the stop protocol's grace.
func TestShEndsAtEndOfInput(t *testing.T) {
	setHome(t)
	id := up(t)
	cmd := binCmd(t, "sh", id) // stdin: /dev/null
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code, took := waitExit(t, cmd, hangBound)
	t.Logf("runbox sh </dev/null ended after %v with %d", took, code)
	if code != 0 {
		t.Errorf("runbox sh </dev/null: exit %d; want 0 (the shell's own, at end of input)", code)
	}

	// A stdin that never ends: SIGTERM hangs the shell up.
	cmd = binCmd(t, "sh", id)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	prompt := &syncBuffer{written: make(chan struct{})}
	cmd.Stdout = prompt
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-prompt.written: // the shell is up
	case <-time.After(hangBound):
		t.Fatal("runbox sh printed no prompt")
	}
	signalled(t, cmd, syscall.SIGTERM)
	code, took = waitExit(t, cmd, hangBound)
	t.Logf("runbox sh ended %v after SIGTERM with %d", took, code)
	if code != 128+int(syscall.SIGHUP) {
		t.Errorf("runbox sh after SIGTERM: exit %d; want %d (the shell hung up, not SIGKILLed after the grace)", code, 128+int(syscall.SIGHUP))
	}
}

// Item 2: a timeout is never a success, and --grace 0 means SIGKILL at once.
func TestTimeoutStatus(t *testing.T) {
	setHome(t)
	id := up(t)
	trap := `trap "exit 0" TERM; sleep 30 & wait`
	o := runBin(t, "exec", "--timeout", "300ms", "--grace", "10s", id, "--", trap)
	if o.code != 124 || !strings.Contains(o.stderr, "timed out") {
		t.Errorf("a timed-out command that exits 0 on SIGTERM: %+v; want exit 124", o)
	}
	o = runBin(t, "exec", "--json", "--timeout", "300ms", "--grace", "10s", id, "--", trap)
	if res := execJSON(t, o); o.code != 124 || res["exit_code"] != 0.0 || res["timed_out"] != true {
		t.Errorf("exec --json of it: exit %d, %v; want 124, with the raw exit_code 0 and timed_out", o.code, res)
	}
	// --grace 0: no SIGTERM, so the trap never runs.
	o = runBin(t, "exec", "--timeout", "300ms", "--grace", "0", id, "--", `trap "echo got TERM; exit 0" TERM; while :; do sleep 0.05; done`)
	if o.code != 137 || strings.Contains(o.stdout, "got TERM") {
		t.Errorf("--grace 0: %+v; want 137 and no SIGTERM", o)
	}
}

// Item 3: on local, --json's cwd is where the command ran.
func TestJSONCwdIsWhereItRan(t *testing.T) {
	setHome(t)
	localNeeded(t)
	id := up(t, "--provider", "local", "--workdir", t.TempDir())
	for _, args := range [][]string{nil, {"--cwd", "/tmp"}, {"--cwd", "sub"}} {
		all := append(append([]string{"exec", "--json"}, args...), id, "--", "mkdir -p /workspace/sub; pwd")
		o := runBin(t, all...)
		res := execJSON(t, o)
		if pwd := strings.TrimSpace(res["stdout"].(string)); res["cwd"] != pwd || pwd == "" {
			t.Errorf("exec --json %v: cwd %q, but the command's pwd printed %q", args, res["cwd"], pwd)
		}
	}
}

// Item 4: --json has every field of the result, the session's directory
// fallback among them.
func TestJSONSessionFallback(t *testing.T) {
	setHome(t)
	id := up(t)
	dir := filepath.Join(t.TempDir(), "gone")
	must(t, "exec", "--session", "s", id, "--", "mkdir -p "+dir+" && cd "+dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	o := runBin(t, "exec", "--json", "--session", "s", id, "--", "pwd")
	res := execJSON(t, o)
	if res["cwd_fallback_from"] != dir || res["cwd"] != filepath.Dir(dir) {
		t.Errorf("exec --json after the session's directory went: %v; want cwd_fallback_from %q, cwd %q", res, dir, filepath.Dir(dir))
	}
	for _, f := range []string{"survivors", "spill_truncated", "stdout_bytes", "stderr_bytes", "left_running", "pid", "stream_gaps"} {
		if _, ok := res[f]; !ok {
			t.Errorf("exec --json lacks %q: %v", f, res)
		}
	}
	if res["stdout_bytes"] != float64(len(filepath.Dir(dir))+1) {
		t.Errorf("stdout_bytes %v; want %d", res["stdout_bytes"], len(filepath.Dir(dir))+1)
	}
}

// Item 5: a name is unique across providers: up refuses a name a docker
// sandbox has (host and local share one record store, which always
// refused), and a name two providers' sandboxes have is an error listing
// both, not a silent pick.
func TestNameUniqueAcrossProviders(t *testing.T) {
	home := setHome(t)
	engine := dockerNeeded(t)
	// The engine for this test; setHome's cleanup, which removes every
	// sandbox ls lists, runs after this is undone, so it never sees the
	// engine's other containers.
	t.Setenv("DOCKER_HOST", engine)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dp := &docker.Provider{Home: home, Runboxd: os.Getenv(providertest.RunboxdEnv)}
	defer dp.Close()
	image := os.Getenv("RUNBOX_TEST_IMAGE")
	if image == "" {
		image = "runbox-test:busybox"
	}
	dsb, err := dp.Create(ctx, runbox.SandboxSpec{Name: "dup", Image: image})
	if err != nil {
		t.Fatalf("create a docker sandbox: %v", err)
	}
	defer dp.Remove(context.Background(), dsb, true)
	withEngine := func(args ...string) outcome {
		cmd := binCmd(t, args...)
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+engine)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return outcome{code, stdout.String(), stderr.String()}
	}
	o := withEngine("up", "--provider", "host", "--name", "dup")
	if o.code != 125 || !strings.Contains(o.stderr, "taken") || !strings.Contains(o.stderr, dsb.ID) {
		t.Errorf("up of a name a docker sandbox has: %+v; want 125 naming it", o)
	}
	// Made past the CLI (the Go API, or an older runbox): both are named.
	hp := &host.Provider{Home: home, Runboxd: os.Getenv(providertest.RunboxdEnv)}
	hsb, err := hp.Create(ctx, runbox.SandboxSpec{Name: "dup"})
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Remove(context.Background(), hsb, true)
	o = withEngine("exec", "dup", "--", "echo which")
	if o.code != 125 || !strings.Contains(o.stderr, "ambiguous") || !strings.Contains(o.stderr, dsb.ID) || !strings.Contains(o.stderr, hsb.ID) {
		t.Errorf("exec of a name two providers have: %+v; want 125 listing both", o)
	}
}

// dockerNeeded returns the docker engine's address (DOCKER_HOST as the
// test started, before setHome hid it), skipping (or with
// RUNBOX_REQUIRE_DOCKER=1 failing) when no engine answers there.
func dockerNeeded(t *testing.T) string {
	t.Helper()
	engine := origDockerHost
	if engine == "" {
		engine = "unix:///var/run/docker.sock"
	}
	cmd := exec.Command("docker", "info")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+engine)
	if out, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_DOCKER") == "1" {
			t.Fatalf("RUNBOX_REQUIRE_DOCKER=1 but no docker engine answers at %s: %v\n%s", engine, err, out)
		}
		t.Skipf("no docker engine answers at %s (start dockerd; RUNBOX_REQUIRE_DOCKER=1 makes this a failure)", engine)
	}
	return engine
}

// origDockerHost is DOCKER_HOST as the test binary started.
var origDockerHost = os.Getenv("DOCKER_HOST")

// Item 8: SIGKILL of runbox exec stops the exec in the sandbox (the
// default), and --cancel-on-exit=false leaves it running.
func TestKilledCLIStopsItsExec(t *testing.T) {
	setHome(t)
	id := up(t)
	m := marker(t)
	// Only the sleeps carry the marker, not runbox's or bash's command line.
	arg := strings.TrimPrefix(m, "sleep ")
	cmd := binCmd(t, "exec", "--grace", "1s", id, "--", "s=sleep; $s "+arg+" & $s "+arg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 2 }); n != 2 {
		t.Fatalf("%d processes with %q; want 2", n, m)
	}
	signalled(t, cmd, syscall.SIGKILL)
	_ = cmd.Wait()
	killedAt := time.Now()
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 0 }); n != 0 {
		t.Fatalf("%d processes of the exec still alive %v after its runbox was SIGKILLed", n, hangBound)
	}
	t.Logf("the exec's processes were gone %v after runbox was SIGKILLed (grace 1s)", time.Since(killedAt))
	var ps string
	for deadline := time.Now().Add(hangBound); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ps = must(t, "ps", id); strings.Contains(ps, "(cancelled)") {
			return
		}
	}
	t.Errorf("ps after the kill: %s; want the exec cancelled", ps)
}

// Item 6: what an exec leaves running is reported, counted by ps, and
// stopped by --kill-leftovers.
func TestLeftovers(t *testing.T) {
	setHome(t)
	id := up(t)
	m := marker(t)
	o := runBin(t, "exec", "--id", "bg", id, "--", m+" &")
	if o.code != 0 || !strings.Contains(o.stderr, "1 process(es) this command started still run") || !strings.Contains(o.stderr, "runbox cancel "+id+" bg") {
		t.Errorf("exec leaving a process: %+v; want it reported with how to stop it", o)
	}
	if n := pollCount(t, m, 0, nil2); n != 1 {
		t.Errorf("%d processes with %q; want 1 left running", n, m)
	}
	if ps := must(t, "ps", id); !strings.Contains(ps, "exited (1 left running)") {
		t.Errorf("ps: %s; want the exited exec marked with its leftover", ps)
	}
	must(t, "cancel", id, "bg")
	if n := pollCount(t, m, hangBound, func(n int) bool { return n == 0 }); n != 0 {
		t.Errorf("cancel of the exited exec left %d processes", n)
	}

	o = runBin(t, "exec", "--json", "--kill-leftovers", id, "--", m+" & echo hi")
	res := execJSON(t, o)
	if n := pollCount(t, m, 0, nil2); n != 0 || res["left_running"] != 0.0 || res["killed"] != 1.0 || res["stdout"] != "hi\n" {
		t.Errorf("exec --kill-leftovers: %d alive after the result, %v; want none, killed 1", n, res)
	}
}

// nil2 is a pollCount condition for one look.
func nil2(int) bool { return true }

// Item 7: Ctrl-C in attach cancels the exec and exits with its status.
func TestAttachInterruptCancels(t *testing.T) {
	setHome(t)
	id := up(t)
	m := marker(t)
	must(t, "exec", "--detach", "--id", "job", id, "--", "echo started; "+m)
	cmd := binCmd(t, "attach", id, "job")
	out := &syncBuffer{written: make(chan struct{})}
	var stderr syncBuffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.written:
	case <-time.After(hangBound):
		t.Fatal("attach replayed nothing")
	}
	signalled(t, cmd, syscall.SIGINT)
	code, _ := waitExit(t, cmd, hangBound)
	if code != 143 || !strings.Contains(stderr.String(), "cancelled") || strings.Contains(stderr.String(), "closed") {
		t.Errorf("attach after Ctrl-C: exit %d, stderr %q; want 143 (the exec's status), cancelled, and no failed cancel", code, stderr.String())
	}
	if n := pollCount(t, m, 0, nil2); n != 0 {
		t.Errorf("%d processes of the exec alive after attach's Ctrl-C", n)
	}
}

// Item 10: the small lies.
func TestSmallTruths(t *testing.T) {
	setHome(t)
	id := up(t)
	v := runBin(t, "--version")
	if v.code != 0 || v.stdout == "" || v.stdout != runBin(t, "version").stdout {
		t.Errorf("--version: %+v; want what version prints", v)
	}
	var insp struct {
		Daemon struct{ Version string } `json:"daemon"`
	}
	if err := jsonUnmarshal(must(t, "inspect", id), &insp); err != nil || insp.Daemon.Version+"\n" != v.stdout {
		t.Errorf("inspect's daemon version %q, runbox version %q: want the same", insp.Daemon.Version, v.stdout)
	}
	if h := runBin(t, "run", "--help"); strings.Contains(h.stdout, "--detach") {
		t.Errorf("run --help offers --detach, which run cannot do")
	}
	if o := runBin(t, "cancel", "--tombstone", id, "never-ran"); o.code != 0 || !strings.Contains(o.stderr, "tombstone") {
		t.Errorf("cancel --tombstone of an unknown id: %+v; want success and a note on stderr", o)
	}
	must(t, "exec", "--detach", "--id", "prefix-job-1", id, "--", "sleep 60")
	if o := runBin(t, "cancel", id, "prefix-j"); o.code != 0 || o.stderr != "" {
		t.Errorf("cancel by a unique exec id prefix: %+v", o)
	}
	if ps := must(t, "ps", id); !strings.Contains(ps, "cancelled") {
		t.Errorf("ps after cancel by prefix: %s", ps)
	}
	if o := runBin(t, "kill", "-s", "NOPE", id, "x"); o.code != 125 || strings.Contains(o.stderr, "spec") || !strings.Contains(o.stderr, "NOPE") {
		t.Errorf("kill -s NOPE: %+v; want 125 naming the signal, not a spec", o)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if o := runBin(t, "cp", missing, id+":/tmp/x"); o.code != 125 || strings.Contains(o.stderr, "sandbox") || !strings.Contains(o.stderr, "local") {
		t.Errorf("cp of a missing local file: %+v; want it blamed on the local side", o)
	}
	if o := runBin(t, "cp", "a", "b"); o.code != 125 || strings.Contains(o.stderr, "spec") {
		t.Errorf("cp usage error: %+v", o)
	}
	// setHome points DOCKER_HOST at a socket that does not exist: an
	// engine never started there holds no sandbox, and ls says nothing.
	if o := runBin(t, "ls"); o.code != 0 || o.stderr != "" {
		t.Errorf("ls without a docker engine: %+v; want nothing on stderr", o)
	}
	t.Setenv("RUNBOX_PROVIDER", "nosuch")
	if o := runBin(t, "up"); o.code != 125 || !strings.Contains(o.stderr, "RUNBOX_PROVIDER") {
		t.Errorf("up with a bad RUNBOX_PROVIDER: %+v; want the variable named", o)
	}
}

// Item 9: the progress bar fits a 50-column terminal, stays on one line,
// and shows the total and a percentage, for cp and sync.
func TestProgressBarFitsTerminal(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_TMUX") == "1" {
			t.Fatal("RUNBOX_REQUIRE_TMUX=1 but tmux is not installed")
		}
		t.Skip("tmux is not installed (apt-get install tmux); set RUNBOX_REQUIRE_TMUX=1 to make this a failure")
	}
	setHome(t)
	id := up(t)
	src := t.TempDir()
	data := make([]byte, 8<<20)
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%d", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := t.TempDir()
	for _, c := range []struct{ label, args string }{
		{"cp", fmt.Sprintf("cp %s %s:%s/one", filepath.Join(src, "f0"), id, dst)},
		{"sync", fmt.Sprintf("sync %s %s:%s/tree", src, id, dst)},
	} {
		rows := inTmux(t, binary(t)+" "+c.args)
		var bars []string
		for _, r := range rows {
			if strings.HasPrefix(r, c.label+"  ") {
				bars = append(bars, r)
			}
		}
		if len(bars) != 1 || !strings.Contains(bars[0], "%") || !strings.Contains(bars[0], "/ ") {
			t.Errorf("runbox %s in a 50-column terminal drew %q (the screen: %q); want one line with total and percentage", c.label, bars, rows)
		}
	}
}

var tmuxMu sync.Mutex

// tmuxServers numbers this process's tmux servers: each pane gets a server
// of its own.
var tmuxServers int

// inTmux runs command in a fresh 50-column tmux pane, waits for it to end,
// and returns the pane's rows.
func inTmux(t *testing.T, command string) []string {
	t.Helper()
	tmuxMu.Lock()
	defer tmuxMu.Unlock()
	tmuxServers++
	sock := fmt.Sprintf("rbtest%d-%d", os.Getpid(), tmuxServers)
	done := filepath.Join(t.TempDir(), "done")
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-L", sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	defer exec.Command("tmux", "-L", sock, "kill-server").Run()
	tmux("new-session", "-d", "-x", "50", "-y", "20", "-s", "t",
		command+"; touch "+done+"; sleep 600")
	deadline := time.Now().Add(hangBound)
	for {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q did not end in tmux; screen:\n%s", command, tmux("capture-pane", "-p", "-t", "t"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return strings.Split(tmux("capture-pane", "-p", "-t", "t"), "\n")
}

// Item 4, text output: output that left the replay ring before attach read
// it is marked where it was cut, with the bytes, and the end names the
// spill file that has it.
func TestTextOutputMarksCut(t *testing.T) {
	setHome(t)
	id := up(t)
	must(t, "exec", "--detach", "--id", "big", id, "--", `head -c 3000000 /dev/zero | tr '\0' x; echo; echo END`)
	for deadline := time.Now().Add(hangBound); !strings.Contains(must(t, "ps", id), "exited"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the exec did not end")
		}
	}
	o := runBin(t, "attach", id, "big")
	if o.code != 0 || !strings.HasSuffix(o.stdout, "END\n") {
		t.Fatalf("attach: exit %d, stderr %q", o.code, o.stderr)
	}
	lines := strings.Split(strings.TrimSpace(o.stderr), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "bytes of output left out here") || !strings.Contains(lines[1], ".stdout") {
		t.Errorf("attach's stderr %q; want the cut marked with its bytes, then the spill file named", o.stderr)
	}
	lost := 3000000 + 1 + 4 - (len(o.stdout))
	if !strings.Contains(lines[0], fmt.Sprintf("[... %d bytes", lost)) {
		t.Errorf("the cut's line %q; want %d bytes (what stdout lacks)", lines[0], lost)
	}
}
