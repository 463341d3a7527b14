package docker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// Podman's services for these tests, as scripts/podman-service.sh starts
// them and `scripts/podman-service.sh env` prints.
const (
	// requirePodmanEnv set to 1 (CI) makes a missing Podman service a
	// failure instead of a skip.
	requirePodmanEnv = "RUNBOX_REQUIRE_PODMAN"
	// rootfulHostEnv is the rootful service's address (unix://...).
	rootfulHostEnv = "RUNBOX_PODMAN_ROOTFUL_HOST"
	// rootlessUserEnv names the plain user whose rootless service listens
	// on /run/user/UID/podman/podman.sock.
	rootlessUserEnv = "RUNBOX_PODMAN_ROOTLESS_USER"
	// podmanChildEnv marks the test binary run against Podman by
	// TestPodman, which then does not run itself again.
	podmanChildEnv = "RUNBOX_PODMAN_CHILD"
)

// podmanTests are the tests TestPodman runs against each Podman service:
// the conformance suite and the docker provider's own cases that do not
// depend on Docker itself (TestCLI and its like build and drive the CLI,
// covered by the suite's cases already).
var podmanTests = []string{
	"TestConformance",
	"TestTimeoutLeavesNoSleep", "TestSequentialExecsProcessBaseline", "TestDockerKill",
	"TestFoundByAnotherProvider", "TestNoBash", "TestSpecLimits", "TestCreateFailures",
	"TestRemoveStopsExecs", "TestSignalsFromInside", "TestSecretOverExecStream",
	"TestCommandsCannotLoseSandbox", "TestCommandsSeeNothingOfRunbox", "TestCommandCannotReplaceSocket",
	"TestRunboxHomeInWorkspace", "TestLimitUnsupportedRefused", "TestEngineDetail",
}

// needPodman skips t (fails it under RUNBOX_REQUIRE_PODMAN=1) for reason.
func needPodman(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv(requirePodmanEnv) == "1" {
		t.Fatalf("%s=1 but %s", requirePodmanEnv, reason)
	}
	t.Skipf("%s (scripts/podman-service.sh start, then eval \"$(scripts/podman-service.sh env)\"; %s=1 makes this a failure)", reason, requirePodmanEnv)
}

// TestPodman runs podmanTests against rootful Podman (as root, through
// DOCKER_HOST) and rootless Podman (as its plain user, with DOCKER_HOST
// unset: the provider finds the user's socket under $XDG_RUNTIME_DIR
// itself), each in a child run of this test binary; every child test is
// reported as a subtest here, its skips with their reasons.
func TestPodman(t *testing.T) {
	if os.Getenv(podmanChildEnv) != "" {
		t.Skip("this run is TestPodman's child")
	}
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	// The binaries where the rootless user can run them.
	dir, err := os.MkdirTemp("", "rbpodman")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	testBin, runboxd := filepath.Join(dir, "docker.test"), filepath.Join(dir, "runboxd")
	for src, dst := range map[string]string{self: testBin, bin: runboxd} {
		if err := copyFile(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("rootful", func(t *testing.T) {
		t.Parallel()
		host := os.Getenv(rootfulHostEnv)
		if host == "" {
			needPodman(t, rootfulHostEnv+" is unset: no rootful Podman service named")
		}
		if why := notPodman(host); why != "" {
			needPodman(t, why)
		}
		runChild(t, testBin, nil, []string{"DOCKER_HOST=" + host, "RUNBOX_RUNBOXD=" + runboxd})
	})
	t.Run("rootless", func(t *testing.T) {
		t.Parallel()
		name := os.Getenv(rootlessUserEnv)
		if name == "" {
			needPodman(t, rootlessUserEnv+" is unset: no rootless Podman user named")
		}
		u, err := user.Lookup(name)
		if err != nil {
			needPodman(t, fmt.Sprintf("rootless Podman user %s: %v", name, err))
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		xdg := filepath.Join("/run/user", u.Uid)
		if why := notPodman("unix://" + filepath.Join(xdg, "podman", "podman.sock")); why != "" {
			needPodman(t, why)
		}
		if os.Geteuid() != 0 {
			needPodman(t, "running the tests as rootless Podman's user needs root")
		}
		tmp := filepath.Join(dir, "tmp")
		if err := os.Mkdir(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(tmp, uid, gid); err != nil {
			t.Fatal(err)
		}
		cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		runChild(t, testBin, cred, []string{
			"HOME=" + u.HomeDir, "USER=" + name, "XDG_RUNTIME_DIR=" + xdg, "TMPDIR=" + tmp,
			"RUNBOX_RUNBOXD=" + runboxd, "DOCKER_HOST=",
		})
	})
}

// notPodman says why host is not a Podman service that answers, or "".
func notPodman(host string) string {
	cli, err := moby.New(moby.WithHost(host), moby.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Sprintf("docker client for %s: %v", host, err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := cli.ServerVersion(ctx, moby.ServerVersionOptions{})
	if err != nil {
		return fmt.Sprintf("no Podman service answers at %s: %v", host, err)
	}
	for _, c := range v.Components {
		if c.Name == "Podman Engine" {
			return ""
		}
	}
	return fmt.Sprintf("the engine at %s is not Podman (%s %s)", host, v.Platform.Name, v.Version)
}

// result is a child test's outcome as go test -v prints it, header the
// line its log lines follow.
var (
	result = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
	header = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
)

// runChild runs podmanTests in the test binary as cred (nil: this user)
// with env added, and reports each of its tests as a subtest of t.
func runChild(t *testing.T, testBin string, cred *syscall.Credential, env []string) {
	t.Helper()
	// The suite on the socket stream only: the exec stream is the same
	// Engine API exec as with Docker (TestConformance/exec covers it there,
	// and the provider cases run both streams), and one pass keeps CI short.
	cmd := exec.Command(testBin, "-test.v", "-test.count=1", "-test.timeout=28m",
		"-test.run=^("+strings.Join(podmanTests, "|")+")$", "-test.skip=^TestConformance$/^exec$")
	cmd.Dir = filepath.Dir(testBin)
	cmd.Env = append(os.Environ(), podmanChildEnv+"=1", "RUNBOX_REQUIRE_DOCKER=1")
	cmd.Env = append(cmd.Env, env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	// With -test.v a test's log lines follow a "=== RUN/CONT/NAME name"
	// header or its "--- STATUS: name" line, indented.
	var order []string
	status, logs := map[string]string{}, map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := result.FindStringSubmatch(line); m != nil {
			status[m[2]] = m[1]
			order = append(order, m[2])
			cur = m[2]
			continue
		}
		if m := header.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			logs[cur] = append(logs[cur], strings.TrimSpace(line))
		}
	}
	for _, name := range order {
		t.Run(name, func(t *testing.T) {
			msg := strings.Join(logs[name], "\n")
			switch status[name] {
			case "FAIL":
				t.Error(msg)
			case "SKIP":
				t.Skip(msg)
			}
		})
	}
	if runErr != nil || len(order) == 0 {
		t.Errorf("child test run: %v\n%s", runErr, tail(out.Bytes(), 200))
	}
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// copyFile copies src to dst, executable by everyone.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestEngineDetail: a sandbox says which engine it runs on (inspect's
// "engine"), Docker or Podman, rootless or not, as the engine does; a
// provider whose process is not the rootless engine's user reaches runboxd
// through docker exec and says why.
func TestEngineDetail(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng, err := p.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, p, runbox.SandboxSpec{})
	kind := "docker"
	if isPodman(t, engine(t)) {
		kind = "podman"
	}
	got := sb.Detail["engine"]
	if !strings.HasPrefix(got, kind+" ") || strings.Contains(got, "rootless") != eng.Rootless || got != eng.String() {
		t.Errorf("detail engine %q, want %s's (%s)", got, kind, eng)
	}
	if os.Getenv(podmanChildEnv) != "" && kind != "podman" {
		t.Errorf("TestPodman's child talks to %s, not Podman (DOCKER_HOST=%q)", got, os.Getenv("DOCKER_HOST"))
	}
	wantSocket := !eng.Rootless || eng.UID < 0 || eng.UID == os.Geteuid()
	if (sb.Detail["stream"] == "socket") != wantSocket || (sb.Detail["stream_why"] == "") != wantSocket {
		t.Errorf("stream %q (%q) on %s as uid %d", sb.Detail["stream"], sb.Detail["stream_why"], eng, os.Geteuid())
	}
}

// TestLimitUnsupportedRefused: on an engine that cannot enforce a limit
// (rootless Podman on cgroup v1 drops every limit with a warning), a spec
// that asks for it is refused with ErrLimitUnsupported (and
// errors.ErrUnsupported), and no container is left; it is never made
// without the limit.
func TestLimitUnsupportedRefused(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng, err := p.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]runbox.SandboxSpec{}
	if !eng.Memory {
		specs["memory"] = runbox.SandboxSpec{Image: testImage, Memory: 64 << 20}
	}
	if !eng.Pids {
		specs["pids"] = runbox.SandboxSpec{Image: testImage, Pids: 50}
	}
	if !eng.CPU {
		specs["cpus"] = runbox.SandboxSpec{Image: testImage, CPUs: 0.5}
	}
	if len(specs) == 0 {
		t.Skipf("%s enforces every limit: nothing to refuse", eng)
	}
	before, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for limit, spec := range specs {
		sb, err := p.Create(ctx, spec)
		if err == nil {
			p.Remove(ctx, sb, true)
			t.Errorf("%s limit on %s: created %s, want ErrLimitUnsupported", limit, eng, sb.ID)
			continue
		}
		if !errors.Is(err, docker.ErrLimitUnsupported) || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), limit) {
			t.Errorf("%s limit on %s: %v, want ErrLimitUnsupported naming it", limit, eng, err)
		}
	}
	after, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) > len(before) {
		t.Errorf("%d sandboxes before the refused creates, %d after", len(before), len(after))
	}
}
