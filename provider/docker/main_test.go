package docker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// Images built by scripts/build-test-image.sh.
var (
	testImage   = envOr("RUNBOX_TEST_IMAGE", "runbox-test:busybox")
	noBashImage = envOr("RUNBOX_TEST_IMAGE_NOBASH", "runbox-test:busybox-nobash")
	// toolsImage has git and python3, for the cases that need them.
	toolsImage = envOr("RUNBOX_TEST_IMAGE_TOOLS", "runbox-test:tools")
)

// podmanChildEnv marks this test binary run against Podman by
// provider/docker/podmantest (TestPodman), which sets it to 1.
const podmanChildEnv = "RUNBOX_PODMAN_CHILD"

// dockerEngine says whether a usable Docker engine answers here;
// RUNBOX_REQUIRE_DOCKER=1 (CI) makes "none does" a failure.
var dockerEngine *providertest.Requirement

// TestMain checks that a Docker engine answers and has the test images, then
// builds runboxd once (exported as $RUNBOX_RUNBOXD) and runs the tests, failing
// the run if a goroutine leaked. Without an engine every test skips, unless
// RUNBOX_REQUIRE_DOCKER=1 makes that a failure.
func TestMain(m *testing.M) {
	if snapshotterMain() {
		return
	}
	dockerEngine = providertest.CheckRequirement("provider/docker", "RUNBOX_REQUIRE_DOCKER", checkEngine)
	providertest.Main(m)
}

// checkEngine returns why the tests cannot run here, or "".
func checkEngine() string {
	cli, err := docker.NewEngineClient()
	if err != nil {
		return fmt.Sprintf("no Docker client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, moby.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Sprintf("no Docker engine answers at %s: %v", cli.DaemonHost(), err)
	}
	for _, img := range []string{testImage, noBashImage} {
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			return fmt.Sprintf("test image %s is missing (build it with scripts/build-test-image.sh): %v", img, err)
		}
	}
	return ""
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// needEngine skips t when this machine has no usable engine.
func needEngine(t testing.TB) {
	t.Helper()
	dockerEngine.Need(t)
}

// engine returns a Docker client for the test's own looks at containers,
// closed when the test ends.
func engine(t testing.TB) *moby.Client {
	t.Helper()
	cli, err := docker.NewEngineClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// stream is one way of reaching runboxd.
type stream struct {
	name  string
	force bool
}

var streams = []stream{{"socket", false}, {"exec", true}}

// newProvider returns a docker provider with its own short home (unix
// socket paths must fit in 107 bytes), both removed when the test ends.
func newProvider(t testing.TB, forceExec bool) *docker.Provider {
	t.Helper()
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "rbxd")
	if err != nil {
		t.Fatal(err)
	}
	p := &docker.Provider{Home: home, Runboxd: bin, ForceExecStream: forceExec}
	t.Cleanup(func() {
		p.Close()
		os.RemoveAll(home)
	})
	return p
}

// proc is a process in a container as the engine's top shows it.
type proc struct {
	pid  int
	stat string
	rss  int64 // bytes
	args string
}

// top lists the container's processes through the engine (docker top: the
// host's ps, filtered to the container's cgroup), not through runboxd. A
// container that is gone or stopped has none.
func top(t testing.TB, cli *moby.Client, containerID string) []proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Podman's top reads the container's processes itself for AIX-style
	// descriptors (psgo); given ps options it runs the image's ps, which
	// busybox's cannot serve.
	args, stat := []string{"-ww", "-eo", "pid,stat,rss,args"}, "STAT"
	if isPodman(t, cli) {
		args, stat = []string{"pid,state,rss,args"}, "STATE"
	}
	res, err := cli.ContainerTop(ctx, containerID, moby.ContainerTopOptions{Arguments: args})
	if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("docker top %.12s: %v", containerID, err)
	}
	col := map[string]int{}
	for i, title := range res.Titles {
		col[title] = i
	}
	for _, want := range []string{"PID", stat, "RSS", "COMMAND"} {
		if _, ok := col[want]; !ok {
			t.Fatalf("docker top %.12s: no %s column in %q", containerID, want, res.Titles)
		}
	}
	var out []proc
	for _, row := range res.Processes {
		pid, _ := strconv.Atoi(row[col["PID"]])
		kb, _ := strconv.ParseInt(row[col["RSS"]], 10, 64)
		out = append(out, proc{pid: pid, stat: row[col[stat]], rss: kb << 10, args: row[col["COMMAND"]]})
	}
	return out
}

// podmanHosts caches, per engine address, whether the engine is Podman.
var podmanHosts sync.Map

// isPodman reports whether cli's engine is Podman.
func isPodman(t testing.TB, cli *moby.Client) bool {
	t.Helper()
	if v, ok := podmanHosts.Load(cli.DaemonHost()); ok {
		return v.(bool)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := cli.ServerVersion(ctx, moby.ServerVersionOptions{})
	if err != nil {
		t.Fatalf("engine version: %v", err)
	}
	podman := false
	for _, c := range v.Components {
		podman = podman || c.Name == "Podman Engine"
	}
	podmanHosts.Store(cli.DaemonHost(), podman)
	return podman
}

// countLive counts live (non-zombie) processes whose command line contains
// marker.
func countLive(ps []proc, marker string) int {
	n := 0
	for _, p := range ps {
		if strings.Contains(p.args, marker) && !strings.HasPrefix(p.stat, "Z") {
			n++
		}
	}
	return n
}

// fixture is the conformance suite's view of a docker sandbox: processes
// are counted with docker top, runboxd is killed with docker kill (it is
// PID 1, so that is the container dying).
func fixture(p *docker.Provider, cli *moby.Client) providertest.Fixture {
	fx := providertest.Fixture{
		Provider:  p,
		Spec:      runbox.SandboxSpec{Image: testImage},
		ToolsSpec: &runbox.SandboxSpec{Image: toolsImage},
		// The exec stream's docker exec of runboxd proxy (docker top
		// sees this container's processes only).
		DialMarker:  "runboxd proxy --socket",
		PidsLimit:   true,
		MemoryLimit: true,
		CountProcesses: func(t testing.TB, sb runbox.Sandbox, marker string) int {
			t.Helper()
			return countLive(top(t, cli, sb.Detail["container"]), marker)
		},
		Zombies: func(t testing.TB, sb runbox.Sandbox) int {
			t.Helper()
			n := 0
			for _, p := range top(t, cli, sb.Detail["container"]) {
				if strings.HasPrefix(p.stat, "Z") {
					n++
				}
			}
			return n
		},
		KillDaemon: func(t testing.TB, sb runbox.Sandbox) {
			t.Helper()
			killContainer(t, cli, sb)
		},
		DaemonRSS: func(t testing.TB, sb runbox.Sandbox) int64 {
			t.Helper()
			for _, p := range top(t, cli, sb.Detail["container"]) {
				if strings.HasPrefix(p.args, "/.runbox/runboxd serve") {
					return p.rss
				}
			}
			t.Fatalf("no runboxd in container %.12s", sb.Detail["container"])
			return 0
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, toolsImage); err != nil {
		fx.ToolsMissing = fmt.Sprintf("test image %s is missing: %v", toolsImage, err)
	}
	// An engine that cannot enforce a limit refuses sandboxes that ask
	// for it (TestLimitUnsupportedRefused); the cases that need it skip,
	// saying why.
	if eng, err := p.EngineInfo(ctx); err == nil && (!eng.Memory || !eng.Pids) {
		fx.MemoryLimit, fx.PidsLimit = eng.Memory, eng.Pids
		fx.NoLimitsReason = fmt.Sprintf("%s: %s", eng, eng.Why)
	}
	return fx
}

// killContainer is `docker kill` of the sandbox's container.
func killContainer(t testing.TB, cli *moby.Client, sb runbox.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.ContainerKill(ctx, sb.Detail["container"], moby.ContainerKillOptions{Signal: "SIGKILL"}); err != nil && !cerrdefs.IsConflict(err) {
		t.Fatalf("docker kill %.12s: %v", sb.Detail["container"], err)
	}
}

// create makes a sandbox removed (with force) when the test ends.
func create(t testing.TB, p *docker.Provider, spec runbox.SandboxSpec) runbox.Sandbox {
	t.Helper()
	if spec.Image == "" {
		spec.Image = testImage
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Remove(ctx, sb, true); err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Errorf("remove %s: %v", sb.ID, err)
		}
	})
	return sb
}
