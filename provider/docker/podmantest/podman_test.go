package podmantest_test

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/runbox/runbox/internal/providertest"
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
	// podmanChildEnv marks the docker test binary run against Podman: its
	// conformance suite leaves the load cases to Docker's run, and
	// TestEngineDetail checks that it talks to Podman.
	podmanChildEnv = "RUNBOX_PODMAN_CHILD"
)

// dockerPkg is the package whose tests run against Podman.
const dockerPkg = "github.com/runbox/runbox/provider/docker"

// podmanTests are the tests of provider/docker that TestPodman runs
// against each Podman service: the conformance suite and the provider's own
// cases that do not depend on Docker itself (TestCLI and its like build and
// drive the CLI through Docker's socket, covered by the suite's cases
// already; TestProxyKilled kills the docker CLI's proxy). A name missing
// from the docker package's tests fails TestPodman: none can drop out of
// the list unnoticed.
var podmanTests = []string{
	"TestConformance",
	"TestTimeoutLeavesNoSleep", "TestSequentialExecsProcessBaseline", "TestDockerKill",
	"TestFoundByAnotherProvider", "TestNoBash", "TestSpecLimits", "TestCreateFailures",
	"TestRemoveStopsExecs", "TestSignalsFromInside", "TestSecretOverExecStream",
	"TestCommandsCannotLoseSandbox", "TestCommandsSeeNothingOfRunbox", "TestCommandCannotReplaceSocket",
	"TestRunboxHomeInWorkspace", "TestLimitUnsupportedRefused", "TestEngineDetail",
}

// TestMain builds runboxd once (as every provider package does) and fails
// the binary if a goroutine leaked.
func TestMain(m *testing.M) {
	providertest.Main(m)
}

// needPodman skips t (fails it under RUNBOX_REQUIRE_PODMAN=1) for reason.
func needPodman(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv(requirePodmanEnv) == "1" {
		t.Fatalf("%s=1 but %s", requirePodmanEnv, reason)
	}
	t.Skipf("%s (scripts/podman-service.sh start, then eval \"$(scripts/podman-service.sh env)\"; %s=1 makes this a failure)", reason, requirePodmanEnv)
}

// service is one Podman service to run the docker tests against.
type service struct {
	name    string
	missing string              // why it cannot be used here, or ""
	cred    *syscall.Credential // the user to run the tests as (nil: this one)
	env     []string            // added to the child's environment
	tmp     int                 // uid owning the child's TMPDIR (-1: this user's)
}

// rootful is root's service, reached through DOCKER_HOST.
func rootful() service {
	s := service{name: "rootful", tmp: -1}
	host := os.Getenv(rootfulHostEnv)
	if host == "" {
		s.missing = rootfulHostEnv + " is unset: no rootful Podman service named"
		return s
	}
	s.missing = notPodman(host)
	// The cases that run inside runboxd alone once the container exists
	// (files, large output and input, exec churn) take the same path here
	// as under rootless Podman and Docker, which run them: rootful skips
	// them, and keeps every case that involves the engine (limits, kill,
	// remove, fork bombs, OOM, load).
	s.env = []string{"DOCKER_HOST=" + host, providertest.SkipCasesEnv + "=" + rootfulSkips}
	return s
}

// rootfulSkips are the conformance cases the rootful run leaves to the
// rootless one (see rootful).
const rootfulSkips = "^(ZeroDelayCancel|OutputBinary|OutputHuge|SequentialExecsNoLeak|InputOversizeRaw|FilesRoundTrip|FilesLargeFile)$"

// rootless is the plain user's service, which the provider finds itself
// under $XDG_RUNTIME_DIR (DOCKER_HOST unset: socket discovery is tested).
func rootless() service {
	s := service{name: "rootless", tmp: -1}
	name := os.Getenv(rootlessUserEnv)
	if name == "" {
		s.missing = rootlessUserEnv + " is unset: no rootless Podman user named"
		return s
	}
	u, err := user.Lookup(name)
	if err != nil {
		s.missing = fmt.Sprintf("rootless Podman user %s: %v", name, err)
		return s
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	xdg := filepath.Join("/run/user", u.Uid)
	if s.missing = notPodman("unix://" + filepath.Join(xdg, "podman", "podman.sock")); s.missing != "" {
		return s
	}
	if os.Geteuid() != 0 {
		s.missing = "running the tests as rootless Podman's user needs root"
		return s
	}
	s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	s.tmp = uid
	s.env = []string{"HOME=" + u.HomeDir, "USER=" + name, "LOGNAME=" + name, "XDG_RUNTIME_DIR=" + xdg, "DOCKER_HOST="}
	return s
}

// TestPodman runs podmanTests against rootful Podman (as root, through
// DOCKER_HOST) and rootless Podman (as its plain user, with DOCKER_HOST
// unset: the provider finds the user's socket under $XDG_RUNTIME_DIR
// itself), in parallel, each in a child run of provider/docker's test
// binary; every child test is reported as a subtest here, its skips with
// their reasons.
func TestPodman(t *testing.T) {
	services := []service{rootful(), rootless()}
	ready := false
	for _, s := range services {
		ready = ready || s.missing == ""
	}
	var testBin, runboxd string
	if ready {
		testBin, runboxd = buildBinaries(t)
	}
	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			if s.missing != "" {
				needPodman(t, s.missing)
			}
			// The child's temporary files (the provider's home, workdirs)
			// where the service's user owns them.
			tmp, err := os.MkdirTemp(filepath.Dir(testBin), s.name)
			if err != nil {
				t.Fatal(err)
			}
			if s.tmp >= 0 {
				if err := os.Chown(tmp, s.tmp, -1); err != nil {
					t.Fatal(err)
				}
			}
			env := append([]string{"TMPDIR=" + tmp, "RUNBOX_RUNBOXD=" + runboxd}, s.env...)
			runChild(t, testBin, s.cred, env)
		})
	}
}

// buildBinaries builds provider/docker's test binary (with -race when
// this one has it) and copies runboxd beside it, in a directory every user
// may read, removed when t ends.
func buildBinaries(t *testing.T) (testBin, runboxd string) {
	t.Helper()
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rbpodman")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testBin, runboxd = filepath.Join(dir, "docker.test"), filepath.Join(dir, "runboxd")
	if err := copyFile(bin, runboxd); err != nil {
		t.Fatal(err)
	}
	// `go test` puts the toolchain that runs the tests first in PATH.
	args := []string{"test", "-c", "-o", testBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, dockerPkg)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	if err := os.Chmod(testBin, 0o755); err != nil {
		t.Fatal(err)
	}
	return testBin, runboxd
}

// notPodman says why host is not a Podman service that answers, or "".
func notPodman(host string) string {
	cli, err := moby.New(moby.WithHost(host), moby.WithAPIVersionNegotiation())
	if err != nil {
		return fmt.Sprintf("docker client for %s: %v", host, err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
	result = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+s)\)`)
	header = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
)

// childTimeout is how long a child run may take: what is left of this
// test binary's -timeout less a minute to report, at most 28 minutes.
func childTimeout(t *testing.T) time.Duration {
	d := 28 * time.Minute
	if dl, ok := t.Deadline(); ok {
		d = min(d, time.Until(dl)-time.Minute)
	}
	return max(d, time.Minute)
}

// runChild runs podmanTests in the test binary as cred (nil: this user)
// with env added, and reports each of its tests as a subtest of t.
func runChild(t *testing.T, testBin string, cred *syscall.Credential, env []string) {
	t.Helper()
	// The suite on the socket stream only: the exec stream is the same
	// Engine API exec as with Docker (TestConformance/exec covers it there,
	// and the provider cases run both streams), and one pass keeps CI short.
	cmd := exec.Command(testBin, "-test.v", "-test.count=1", "-test.timeout="+childTimeout(t).String(),
		"-test.run=^("+strings.Join(podmanTests, "|")+")$", "-test.skip=^TestConformance$/^exec$")
	cmd.Dir = filepath.Dir(testBin)
	cmd.Env = append(os.Environ(), podmanChildEnv+"=1", "RUNBOX_REQUIRE_DOCKER=1")
	cmd.Env = append(cmd.Env, env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("child run of %d tests: %v, %s", len(podmanTests), runErr, time.Since(start).Round(time.Second))
	// With -test.v a test's log lines follow a "=== RUN/CONT/NAME name"
	// header or its "--- STATUS: name" line, indented.
	var order []string
	status, took, logs := map[string]string{}, map[string]string{}, map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := result.FindStringSubmatch(line); m != nil {
			status[m[2]], took[m[2]] = m[1], m[3]
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
			// The child's time: this subtest only reports it.
			msg := strings.Join(append(logs[name], "(took "+took[name]+" in the child)"), "\n")
			switch status[name] {
			case "FAIL":
				t.Error(msg)
			case "SKIP":
				t.Skip(msg)
			default:
				t.Log("took " + took[name] + " in the child")
			}
		})
	}
	for _, name := range podmanTests {
		if status[name] == "" {
			t.Errorf("%s did not run: no such test in %s, or the child died first", name, dockerPkg)
		}
	}
	if runErr != nil || len(order) == 0 {
		t.Errorf("child test run: %v\n%s", runErr, tail(out.Bytes(), 200))
	}
	// A child that ran out of time names the tests still running right
	// after its panic line, before the goroutine dump tail shows.
	if i := bytes.Index(out.Bytes(), []byte("panic: test timed out")); i >= 0 {
		t.Errorf("child timed out:\n%s", head(out.Bytes()[i:], 40))
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

// head returns the first n lines of b.
func head(b []byte, n int) string {
	lines := strings.SplitN(string(b), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
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
