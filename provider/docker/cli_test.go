package docker_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// cliOf is runCLI as a providertest.CLI, for the suite's CLI helpers.
func cliOf(t *testing.T) providertest.CLI {
	return func(args ...string) (int, string, string) { return runCLI(t, args...) }
}

// runCLI runs the runbox CLI in this process with home as RUNBOX_HOME and
// returns its exit status and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code = cli.Main(ctx, cli.ServerCommands{}, args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestCLI drives the docker provider through the CLI as a user would: run
// with the command's own status and streams, a timeout that leaves no
// process behind, docker kill showing up as a lost sandbox, and rm.
func TestCLI(t *testing.T) {
	needEngine(t)
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "rbxc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	t.Setenv("RUNBOX_HOME", home)
	t.Setenv("RUNBOX_RUNBOXD", bin)

	code, stdout, stderr := runCLI(t, "run", "--provider", "docker", "--image", testImage, "--",
		"echo out; echo err >&2; exit 7")
	if code != 7 || stdout != "out\n" || stderr != "err\n" {
		t.Errorf("run: status %d, stdout %q, stderr %q; want 7, \"out\\n\", \"err\\n\"", code, stdout, stderr)
	}

	name := "cli-" + strings.ToLower(t.Name())
	code, stdout, stderr = runCLI(t, "up", "--provider", "docker", "--image", noBashImage, "--name", name)
	if code != 0 {
		t.Fatalf("up: status %d: %s", code, stderr)
	}
	id := strings.TrimSpace(stdout)
	defer runCLI(t, "rm", "-f", id)

	code, _, stderr = runCLI(t, "exec", "--timeout", "1s", name, "--", "sleep 300 & sleep 300")
	if code != 128+15 || !strings.Contains(stderr, "timed out") {
		t.Errorf("exec with a 1s timeout: status %d, stderr %q; want 143 and 'timed out'", code, stderr)
	}
	code, stdout, _ = runCLI(t, "exec", name, "--", "ps -o pid,args | grep -c '[s]leep 300' || true")
	if code != 0 || strings.TrimSpace(stdout) != "0" {
		t.Errorf("sleep processes left after the timeout: %q (status %d), want 0", stdout, code)
	}

	p := &docker.Provider{}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	killContainer(t, engine(t), sb)
	code, stdout, _ = runCLI(t, "ls")
	if code != 0 || !containsLine(stdout, id, "lost") {
		t.Errorf("ls after docker kill (status %d):\n%s\nwant %s marked lost", code, stdout, id)
	}
	code, _, stderr = runCLI(t, "exec", name, "--", "true")
	if code != cli.ExitStatusFailure || !strings.Contains(stderr, runbox.ErrSandboxLost.Error()) || !strings.Contains(stderr, "exited") {
		t.Errorf("exec in a killed sandbox: status %d, stderr %q; want 125, sandbox lost, container exited", code, stderr)
	}
	if code, _, stderr = runCLI(t, "rm", name); code != 0 {
		t.Errorf("rm of a killed sandbox: status %d: %s", code, stderr)
	}
	if code, stdout, _ = runCLI(t, "ls"); strings.Contains(stdout, id) {
		t.Errorf("ls after rm still shows %s:\n%s", id, stdout)
	}
}

// containsLine reports whether some line of s contains every word.
func containsLine(s string, words ...string) bool {
	for line := range strings.Lines(s) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// TestCLINonRootUser: a user who may use the engine (in the docker group)
// but is not root reaches runboxd over the socket stream too, although the
// container's root made the socket.
func TestCLINonRootUser(t *testing.T) {
	needEngine(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user: run the tests as root (CI does)")
	}
	grp, err := user.LookupGroup("docker")
	if err != nil {
		t.Skipf("no docker group on this machine (%v): the docker.io package makes one (groupadd docker)", err)
	}
	gid, err := strconv.Atoi(grp.Gid)
	if err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	dir := providertest.BuildForAnyUser(t)
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "runbox"), "run", "--provider", "docker", "--image", testImage, "--", "id -u")
	cmd.Dir = home
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home, "RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd")}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		cmd.Env = append(cmd.Env, "DOCKER_HOST="+h)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{uint32(gid)}}}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("runbox run --provider docker as uid %d in the docker group: %v\n%s", nobody, err, out)
	}
}
