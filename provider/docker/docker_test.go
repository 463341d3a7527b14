package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/host"
)

// forEachStream runs f, in parallel, once per stream to runboxd.
func forEachStream(t *testing.T, f func(t *testing.T, p *docker.Provider)) {
	t.Helper()
	needEngine(t)
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, newProvider(t, s.force))
		})
	}
}

// dial returns a client to sb, closed when the test ends.
func dial(t testing.TB, p runbox.Provider, sb runbox.Sandbox) *rbclient.Client {
	t.Helper()
	c := rbclient.New(p.Dialer(sb), rbclient.WithSandboxName(sb.ID))
	t.Cleanup(func() { c.Close() })
	return c
}

// run executes command and fails the test on an error (not on an exit code).
func run(t testing.TB, c *rbclient.Client, command string, opts ...rbclient.ExecOption) runbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, command, opts...)
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

func wantStdout(t testing.TB, res runbox.Result, want string) {
	t.Helper()
	if !res.OK() || string(res.Stdout) != want {
		t.Errorf("exit %d timed_out %v stdout %q stderr %q; want exit 0 and stdout %q",
			res.ExitCode, res.TimedOut, res.Stdout, res.Stderr, want)
	}
}

// TestTimeoutLeavesNoSleep: a timed-out `sleep 300 & sleep 300` leaves no
// sleep process in the container, as the engine sees it, and the container
// serves the next command.
func TestTimeoutLeavesNoSleep(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		cli := engine(t)
		sb := create(t, p, runbox.SandboxSpec{})
		c := dial(t, p, sb)
		// The exec's timeout leaves the engine's top time to see both
		// sleeps: ten of its calls as one takes here, at least a second.
		// Podman's top (psgo, joining the container's namespaces) took
		// 0.2-0.7 s a call on a loaded machine, Docker's ~50 ms, and one
		// second was too short for Podman to see the sleeps.
		began := time.Now()
		top(t, cli, sb.Detail["container"])
		timeout := max(time.Second, 10*time.Since(began))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute+timeout)
		defer cancel()
		proc, err := c.Start(ctx, "sleep 300 & sleep 300", rbclient.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		// Both sleeps run before the timeout (else the case tests nothing).
		seen := 0
		for deadline := time.Now().Add(timeout); seen < 2 && time.Now().Before(deadline); {
			seen = max(seen, countLive(top(t, cli, sb.Detail["container"]), "sleep 300"))
			time.Sleep(20 * time.Millisecond)
		}
		if seen < 2 {
			t.Errorf("saw %d sleep 300 processes while the command ran (%s timeout), want 2", seen, timeout)
		}
		res, err := proc.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !res.TimedOut || res.ExitCode != 143 {
			t.Errorf("sleep 300 & sleep 300 with a timeout: exit %d timed_out %v; want 143, timed out", res.ExitCode, res.TimedOut)
		}
		ps := top(t, cli, sb.Detail["container"])
		if n := countLive(ps, "sleep"); n != 0 {
			t.Errorf("%d sleep processes left in the container after the timeout: %+v", n, ps)
		}
		wantStdout(t, run(t, c, "echo next"), "next\n")
	})
}

// TestSequentialExecsProcessBaseline: 200 execs leave the container's
// process count, per the engine, where it was.
func TestSequentialExecsProcessBaseline(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		cli := engine(t)
		sb := create(t, p, runbox.SandboxSpec{})
		c := dial(t, p, sb)
		wantStdout(t, run(t, c, "echo warm"), "warm\n")
		base := top(t, cli, sb.Detail["container"])
		for i := range 200 {
			if res := run(t, c, "true"); !res.OK() {
				t.Fatalf("exec %d of true: exit %d", i, res.ExitCode)
			}
		}
		var now []proc
		deadline := time.Now().Add(5 * time.Second)
		for {
			now = top(t, cli, sb.Detail["container"])
			if len(now) <= len(base) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if len(now) != len(base) {
			t.Errorf("container has %d processes after 200 execs, %d before:\nbefore %+v\nafter  %+v", len(now), len(base), base, now)
		}
		t.Logf("%d processes in the container before and after: %+v", len(now), now)
	})
}

// TestDockerKill: a container killed from outside mid-exec is
// ErrSandboxLost within 2 s, Get and List report it not alive, and Remove
// (without force) cleans it up.
func TestDockerKill(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		cli := engine(t)
		sb := create(t, p, runbox.SandboxSpec{})
		c := dial(t, p, sb)
		started := make(chan struct{})
		var once sync.Once
		type outcome struct {
			res runbox.Result
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := c.Exec(ctx, "echo up; sleep 30", rbclient.WithOnChunk(func(runbox.Chunk) { once.Do(func() { close(started) }) }))
			done <- outcome{res, err}
		}()
		select {
		case <-started:
		case o := <-done:
			t.Fatalf("exec ended early: %+v %v", o.res, o.err)
		case <-time.After(time.Minute):
			t.Fatal("no output within a minute")
		}
		killContainer(t, cli, sb)
		killed := time.Now()
		o := <-done
		elapsed := time.Since(killed)
		t.Logf("exec returned %v after docker kill: %v", elapsed, o.err)
		if !errors.Is(o.err, runbox.ErrSandboxLost) {
			t.Fatalf("exec after docker kill: %+v, %v; want ErrSandboxLost", o.res, o.err)
		}
		if elapsed > 2*time.Second {
			t.Errorf("ErrSandboxLost came %v after docker kill, want within 2s", elapsed)
		}
		if rerr, ok := errors.AsType[*runbox.Error](o.err); !ok || rerr.Sandbox != sb.ID {
			t.Errorf("error %v does not name sandbox %s", o.err, sb.ID)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := p.Get(ctx, sb.ID)
		if err != nil || got.Alive {
			t.Errorf("Get after docker kill: alive %v, err %v; want found, not alive", got.Alive, err)
		}
		list, err := p.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range list {
			if l.ID == sb.ID {
				found = true
				if l.Alive {
					t.Errorf("List after docker kill shows %s alive", sb.ID)
				}
			}
		}
		if !found {
			t.Errorf("List after docker kill does not show %s", sb.ID)
		}

		if err := p.Remove(ctx, got, false); err != nil {
			t.Fatalf("remove killed sandbox without force: %v", err)
		}
		if _, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("container %.12s after remove: %v; want not found", sb.Detail["container"], err)
		}
		if d := sb.Detail["dir"]; d != "" {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state dir %s after remove: %v; want gone", d, err)
			}
		}
		if _, err := p.Get(ctx, sb.ID); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("Get after remove: %v; want ErrSandboxNotFound", err)
		}
	})
}

// TestProxyKilled: killing the `runboxd proxy` process of the exec stream
// mid-command (the container lives on) makes the client open a new stream
// and re-attach: the command runs once and its output arrives complete,
// exactly once.
func TestProxyKilled(t *testing.T) {
	needEngine(t)
	p := newProvider(t, true)
	cli := engine(t)
	sb := create(t, p, runbox.SandboxSpec{})
	var dials atomic.Int32
	base := p.Dialer(sb)
	c := rbclient.New(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		return base(ctx)
	}, rbclient.WithSandboxName(sb.ID))
	t.Cleanup(func() { c.Close() })

	f := "/tmp/proxy-killed"
	var streamed bytes.Buffer
	var mu sync.Mutex
	first := make(chan struct{})
	var once sync.Once
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := c.Exec(ctx, fmt.Sprintf("for i in 1 2 3 4 5; do echo $i; echo $i >> %s; sleep 0.5; done", f),
			rbclient.WithOnChunk(func(ch runbox.Chunk) {
				mu.Lock()
				streamed.Write(ch.Data)
				mu.Unlock()
				once.Do(func() { close(first) })
			}))
		done <- outcome{res, err}
	}()
	select {
	case <-first:
	case o := <-done:
		t.Fatalf("exec ended early: %+v %v", o.res, o.err)
	}
	before := countLive(top(t, cli, sb.Detail["container"]), "runboxd proxy")
	// busybox has no pkill: walk /proc. The killer's own command line
	// mentions the proxy too, but does not start with it.
	out, code := dockerExec(t, cli, sb.Detail["container"], "sh", "-c", `
		for d in /proc/[0-9]*; do
			case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in
			"/.runbox/runboxd proxy "*) kill -KILL "${d#/proc/}" && echo "killed ${d#/proc/}" ;;
			esac
		done`)
	if code != 0 || !strings.Contains(out, "killed") {
		t.Fatalf("kill runboxd proxy: exit %d: %q", code, out)
	}
	t.Logf("in the container: %s", strings.TrimSpace(out))
	o := <-done
	if o.err != nil {
		t.Fatalf("exec across a killed proxy: %v", o.err)
	}
	const want = "1\n2\n3\n4\n5\n"
	wantStdout(t, o.res, want)
	mu.Lock()
	if streamed.String() != want {
		t.Errorf("streamed %q, want %q exactly once", streamed.String(), want)
	}
	mu.Unlock()
	t.Logf("%d proxy process(es) before the kill; the client dialled %d times", before, dials.Load())
	if before < 1 {
		t.Errorf("no runboxd proxy process seen in the container before the kill")
	}
	if dials.Load() < 2 {
		t.Errorf("the client dialled %d time(s): the proxy kill did not break the stream", dials.Load())
	}
	wantStdout(t, run(t, c, "cat "+f), want)
}

// dockerExec runs argv in the container through the engine and returns its
// combined output and exit code.
func dockerExec(t testing.TB, cli *moby.Client, containerID string, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ec, err := cli.ExecCreate(ctx, containerID, moby.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	ar, err := cli.ExecAttach(ctx, ec.ID, moby.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	defer ar.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, ar.Reader); err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	ei, err := cli.ExecInspect(ctx, ec.ID, moby.ExecInspectOptions{})
	if err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	return out.String(), ei.ExitCode
}

// TestFoundByAnotherProvider: a sandbox created by one Provider value is
// found and used by a fresh one with nothing in common but the engine (as
// `runbox exec` in another process would), by id, name and id prefix; and
// through a forced exec stream, as from another machine.
func TestFoundByAnotherProvider(t *testing.T) {
	needEngine(t)
	creator := newProvider(t, false)
	name := "rbxt-" + fmt.Sprint(time.Now().UnixNano())
	sb := create(t, creator, runbox.SandboxSpec{Name: name})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			fresh := newProvider(t, s.force)
			for _, key := range []string{sb.ID, name, sb.ID[:6]} {
				got, err := fresh.Get(ctx, key)
				if err != nil {
					t.Fatalf("Get(%q) from a fresh provider: %v", key, err)
				}
				if got.ID != sb.ID || got.Name != name || !got.Alive {
					t.Errorf("Get(%q) = id %s name %q alive %v; want %s %q alive", key, got.ID, got.Name, got.Alive, sb.ID, name)
				}
				wantStdout(t, run(t, dial(t, fresh, got), "echo found"), "found\n")
			}
			list, err := fresh.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slicesContainsID(list, sb.ID) {
				t.Errorf("List from a fresh provider does not show %s", sb.ID)
			}
		})
	}
	if _, err := creator.Get(ctx, "no-such-sandbox"); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("Get(no-such-sandbox): %v; want ErrSandboxNotFound", err)
	}
	_, err := creator.Create(ctx, runbox.SandboxSpec{Image: testImage, Name: name})
	if !errors.Is(err, host.ErrNameInUse) {
		t.Errorf("second sandbox named %q: %v; want ErrNameInUse", name, err)
	}
}

func slicesContainsID(list []runbox.Sandbox, id string) bool {
	for _, sb := range list {
		if sb.ID == id {
			return true
		}
	}
	return false
}

// TestNoBash: an image without bash works through sh.
func TestNoBash(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		sb := create(t, p, runbox.SandboxSpec{Image: noBashImage})
		c := dial(t, p, sb)
		wantStdout(t, run(t, c, `if command -v bash >/dev/null; then echo bash; else echo no bash; fi; echo $((6*7))`), "no bash\n42\n")
		if res := run(t, c, "exit 3"); res.ExitCode != 3 {
			t.Errorf("exit 3 under sh: exit %d", res.ExitCode)
		}
		res := run(t, c, "sleep 300", rbclient.WithTimeout(500*time.Millisecond))
		if !res.TimedOut || res.ExitCode != 143 {
			t.Errorf("sleep 300 with a timeout under sh: exit %d timed_out %v", res.ExitCode, res.TimedOut)
		}
	})
}

// TestSpecLimits: the spec's limits, network and workdir reach the
// container: the engine records them, and the sandbox sees them. On an
// engine that cannot enforce a limit (rootless Podman on cgroup v1) the
// sandbox is made without it and the rest is checked; the test then skips,
// naming the limits and why (TestLimitUnsupportedRefused shows that a spec
// asking for them is refused there).
func TestSpecLimits(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	cli := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng, err := p.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "from-host"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := runbox.SandboxSpec{Workdir: work, Memory: 256 << 20, Pids: 100, CPUs: 0.5}
	var unenforced []string
	if !eng.Memory {
		spec.Memory, unenforced = 0, append(unenforced, "memory")
	}
	if !eng.Pids {
		spec.Pids, unenforced = 0, append(unenforced, "pids")
	}
	if !eng.CPU {
		spec.CPUs, unenforced = 0, append(unenforced, "cpus")
	}
	sb := create(t, p, spec)
	ir, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ir.Container.HostConfig
	wantPids := spec.Pids > 0
	if hc.Memory != spec.Memory || (hc.PidsLimit != nil && *hc.PidsLimit > 0) != wantPids ||
		hc.NanoCPUs != int64(spec.CPUs*1e9) || hc.NetworkMode != "none" {
		t.Fatalf("host config: memory %d pids %v nanocpus %d network %q; want %d, a limit %v, %d, none",
			hc.Memory, hc.PidsLimit, hc.NanoCPUs, hc.NetworkMode, spec.Memory, wantPids, int64(spec.CPUs*1e9))
	}
	c := dial(t, p, sb)
	if wantPids {
		// The container's pids limit counts runboxd's threads: the
		// commands get their 100 beside those runboxd keeps, and not many
		// more.
		threads, err := strconv.ParseInt(strings.TrimSpace(string(run(t, c, "ls /proc/1/task | wc -l").Stdout)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pids limit %d, runboxd threads %d", *hc.PidsLimit, threads)
		if free := *hc.PidsLimit - threads; free < 100 || free > 110 {
			t.Errorf("pids limit %d with %d runboxd threads leaves commands %d, want 100 (to 110)", *hc.PidsLimit, threads, free)
		}
	}
	if ir.Container.Config.Labels[docker.LabelSandbox] != sb.ID {
		t.Errorf("label %s = %q, want %s", docker.LabelSandbox, ir.Container.Config.Labels[docker.LabelSandbox], sb.ID)
	}
	wantStdout(t, run(t, c, "pwd; cat from-host; echo back > from-sandbox"), "/workspace\nhello\n")
	if b, err := os.ReadFile(filepath.Join(work, "from-sandbox")); err != nil || string(b) != "back\n" {
		t.Errorf("file written in /workspace: %q, %v; want it on the host", b, err)
	}
	wantStdout(t, run(t, c, "ls /sys/class/net"), "lo\n")
	// PID 1 is runboxd (serving on the bind-mounted socket), not the image's
	// entrypoint.
	if got := run(t, c, "cat /proc/1/cmdline | tr '\\0' ' '"); !got.OK() || !strings.HasPrefix(string(got.Stdout), "/.runbox/runboxd serve --socket /.runbox/run/runboxd.sock ") {
		t.Errorf("PID 1 is %q (exit %d), want runboxd serve on the bind-mounted socket", got.Stdout, got.ExitCode)
	}
	if len(unenforced) > 0 {
		// After the checks above: a failed one still fails the test.
		t.Skipf("%s cannot enforce %s (%s): workdir, network and PID 1 checked without them; TestLimitUnsupportedRefused checks that a spec asking for them is refused",
			eng, strings.Join(unenforced, ", "), eng.Why)
	}
}

// TestCreateFailures: a spec without an image, a runboxd that is not static
// and a runboxd that dies at start fail with clear errors and leave no
// container behind.
func TestCreateFailures(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	cli := engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := labelled(t, cli, p.Home)

	if _, err := p.Create(ctx, runbox.SandboxSpec{}); !errors.Is(err, docker.ErrImageRequired) {
		t.Errorf("create without an image: %v; want ErrImageRequired", err)
	}
	if dyn, err := os.Executable(); err == nil && isDynamic(dyn) {
		q := &docker.Provider{Home: p.Home, Runboxd: dyn}
		if _, err := q.Create(ctx, runbox.SandboxSpec{Image: testImage}); !errors.Is(err, docker.ErrNotStatic) {
			t.Errorf("create with dynamic runboxd %s: %v; want ErrNotStatic", dyn, err)
		}
		q.Close()
	}
	q := &docker.Provider{Home: p.Home, Runboxd: filepath.Join(t.TempDir(), "runboxd")}
	if _, err := q.Create(ctx, runbox.SandboxSpec{Image: testImage}); !errors.Is(err, host.ErrNoRunboxd) {
		t.Errorf("create with a missing runboxd: %v; want ErrNoRunboxd", err)
	}
	q.Close()

	_, err := p.Create(ctx, runbox.SandboxSpec{Image: testImage, DaemonArgs: []string{"--no-such-flag"}})
	if err == nil {
		t.Fatal("create with a bad runboxd flag succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("create with a bad runboxd flag: %v; want the container's log quoted", err)
	}
	t.Logf("bad flag: %v", err)
	if after := labelled(t, cli, p.Home); after != before {
		t.Errorf("%d runbox containers before the failed creates, %d after", before, after)
	}
	// The home's copy of runboxd (docker/bin) stays for the next Create.
	ents, _ := os.ReadDir(filepath.Join(p.Home, "docker"))
	ents = slices.DeleteFunc(ents, func(e os.DirEntry) bool { return e.Name() == "bin" })
	if len(ents) != 0 {
		t.Errorf("state dirs left behind: %v", ents)
	}
}

// isDynamic reports whether the ELF file at path asks for an interpreter.
func isDynamic(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b[:min(len(b), 4096)], []byte("/ld-linux"))
}

// labelled counts runbox's containers on the engine whose socket is under
// home, i.e. those made by a provider with that home (other tests, in this
// process or another, may be creating their own meanwhile).
func labelled(t testing.TB, cli *moby.Client, home string) int {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), moby.ContainerListOptions{All: true, Filters: make(moby.Filters).Add("label", docker.LabelSandbox)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range res.Items {
		if strings.HasPrefix(c.Labels[docker.LabelSocket], home+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestRemoveStopsExecs: Remove stops running execs with the stop protocol
// (the exec sees SIGTERM and can clean up) before the container goes.
func TestRemoveStopsExecs(t *testing.T) {
	forEachStream(t, func(t *testing.T, p *docker.Provider) {
		work := t.TempDir()
		sb := create(t, p, runbox.SandboxSpec{Workdir: work})
		c := dial(t, p, sb)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.Start(ctx, "trap 'echo stopped > /workspace/trapped; exit 0' TERM; echo ready > /workspace/ready; while :; do sleep 0.1; done"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(work, "ready")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the exec never got ready")
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
		if err := p.Remove(ctx, sb, false); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(work, "trapped")); err != nil || string(b) != "stopped\n" {
			t.Errorf("the exec's TERM trap left %q, %v; want it run before the container went", b, err)
		}
		if _, err := p.Get(ctx, sb.ID); !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("Get after remove: %v; want ErrSandboxNotFound", err)
		}
	})
}

// TestRunboxdFromEnv: the provider finds runboxd through $RUNBOX_RUNBOXD,
// which TestMain sets, when Provider.Runboxd is empty.
func TestRunboxdFromEnv(t *testing.T) {
	needEngine(t)
	if os.Getenv(providertest.RunboxdEnv) == "" {
		t.Fatal("RUNBOX_RUNBOXD is not set, though TestMain sets it")
	}
	home, err := os.MkdirTemp("", "rbxd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	p := &docker.Provider{Home: home}
	t.Cleanup(func() { p.Close() }) // after the sandbox's removal
	sb := create(t, p, runbox.SandboxSpec{})
	wantStdout(t, run(t, dial(t, p, sb), "echo env"), "env\n")
}

// TestEngineUnreachable needs no engine: with none at DOCKER_HOST, every
// call says so as runbox.ErrProviderUnavailable, naming where it looked.
func TestEngineUnreachable(t *testing.T) {
	sock := t.TempDir() + "/no-engine.sock"
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	p := &docker.Provider{Home: t.TempDir()}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, listErr := p.List(ctx)
	_, getErr := p.Get(ctx, "anything")
	_, createErr := p.Create(ctx, runbox.SandboxSpec{Image: testImage})
	for name, err := range map[string]error{"list": listErr, "get": getErr, "create": createErr} {
		if !errors.Is(err, runbox.ErrProviderUnavailable) || !strings.Contains(fmt.Sprint(err), sock) {
			t.Errorf("%s with no engine: %v; want ErrProviderUnavailable naming %s", name, err, sock)
		}
	}
}

// TestSignalsFromInside: runboxd is the container's PID 1, which its
// commands can signal: `kill 1`, `pkill runboxd`, every signal but the
// container's stop signal, leave the sandbox serving, and commands start
// with no signal ignored. `docker stop` still stops a running exec with the
// stop protocol (its TERM trap runs) before the container ends.
func TestSignalsFromInside(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	cli := engine(t)
	work := t.TempDir()
	sb := create(t, p, runbox.SandboxSpec{Workdir: work})
	c := dial(t, p, sb)
	run(t, c, "kill 1; pkill runboxd; for s in $(seq 1 64); do [ $s = 37 ] || kill -$s 1 2>/dev/null; done; sleep 0.2")
	got := run(t, c, "echo still here; grep SigIgn /proc/self/status")
	if !strings.Contains(string(got.Stdout), "still here") || !strings.Contains(string(got.Stdout), "0000000000000000") {
		t.Fatalf("after signals to PID 1: %q (exit %d); want the sandbox serving, nothing ignored", got.Stdout, got.ExitCode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Start(ctx, "trap 'echo stopped > /workspace/trapped; exit 0' TERM; echo ready > /workspace/ready; while :; do sleep 0.1; done"); err != nil {
		t.Fatal(err)
	}
	for !exists(filepath.Join(work, "ready")) {
		if ctx.Err() != nil {
			t.Fatal("the exec never got ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := cli.ContainerStop(ctx, sb.Detail["container"], moby.ContainerStopOptions{}); err != nil {
		t.Fatalf("docker stop: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(work, "trapped")); err != nil || string(b) != "stopped\n" {
		t.Errorf("docker stop: the exec's TERM trap left %q, %v; want it run before the container stopped", b, err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
