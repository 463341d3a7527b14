package local_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/providertest"
)

// Behaviours of the local provider that docs/cli.md and docs/providers.md
// promise, through the CLI (issue 20).

// localCLI sets the environment for the CLI to make local sandboxes in a
// fresh home, and returns a function running the CLI in this process.
func localCLI(t *testing.T) func(args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := newProvider(t)
	t.Setenv("RUNBOX_HOME", p.Home)
	t.Setenv("RUNBOX_RUNBOXD", p.Runboxd)
	t.Setenv("RUNBOX_PROVIDER", "local")
	t.Setenv("DOCKER_HOST", "unix://"+p.Home+"/no-docker-engine.sock")
	t.Setenv("KUBECONFIG", p.Home+"/no-kubeconfig") // CI's cluster holds other tests' pods
	run := func(args ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		code := cli.Main(ctx, cli.ServerCommands{}, args, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	return run
}

// upLocal runs `runbox up` with args and removes the sandbox when the test
// ends, reporting a failed removal.
func upLocal(t *testing.T, rb func(...string) (int, string, string), args ...string) string {
	t.Helper()
	code, out, errs := rb(append([]string{"up", "--workdir", t.TempDir()}, args...)...)
	if code != 0 {
		t.Fatalf("up %q: exit %d, stderr %q", args, code, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() {
		if code, _, errs := rb("rm", "-f", id); code != 0 {
			t.Errorf("cleanup: rm -f %s: exit %d, %s", id, code, errs)
		}
	})
	return id
}

// TestCLIRootfs: --rootfs DIR makes DIR the sandbox's root, under an overlay:
// the sandbox sees DIR's files and not the host's, and what it writes does
// not reach DIR.
func TestCLIRootfs(t *testing.T) {
	rb := localCLI(t)
	busybox, err := osexec.LookPath("busybox")
	if err != nil {
		t.Fatalf("the rootfs is made from a static busybox, and there is none: apt-get install busybox-static (%v)", err)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "cat", "ls", "echo", "test"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	token := fmt.Sprintf("rootfs-%d", rand.Int64())
	if err := os.WriteFile(filepath.Join(root, "etc", "runbox-rootfs"), []byte(token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := upLocal(t, rb, "--rootfs", root)
	code, out, errs := rb("exec", id, "--", "cat /etc/runbox-rootfs; ls /bin; test -e /usr/bin/env && echo host-root || echo no-host-root; echo written > /etc/new-file")
	want := token + "\nbusybox\ncat\necho\nls\nsh\ntest\nno-host-root\n"
	if code != 0 || out != want {
		if len(out) > 300 {
			out = out[:300] + "..."
		}
		t.Errorf("exec in a --rootfs sandbox: exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "new-file")); !os.IsNotExist(err) {
		t.Errorf("a write in the sandbox reached the rootfs directory: %v", err)
	}
	if code, out, _ := rb("exec", id, "--", "cat /etc/new-file"); code != 0 || out != "written\n" {
		t.Errorf("the sandbox's own write: exit %d, %q; want it kept in the overlay", code, out)
	}
}

// TestCLIOutOfMemory: a command the memory limit kills exits 137 with
// `runbox: killed: out of memory` on stderr; with --json the object says
// oom_killed. The sandbox serves on.
func TestCLIOutOfMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("limits need root (only root can make the cgroups they use): run the tests as root")
	}
	rb := localCLI(t)
	id := upLocal(t, rb, "--memory", "128M")
	const hog = `x=$(head -c 1073741824 /dev/zero | tr '\0' a); echo ${#x}`
	code, _, errs := rb("exec", id, "--", hog)
	if code != 137 || !strings.Contains(errs, "runbox: killed: out of memory") {
		t.Errorf("exec of a 1 GiB hog under --memory 128M: exit %d, stderr %q; want 137 and runbox: killed: out of memory", code, errs)
	}
	code, out, errs := rb("exec", "--json", id, "--", hog)
	var res struct {
		ExitCode  int  `json:"exit_code"`
		OOMKilled bool `json:"oom_killed"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 137 || res.ExitCode != 137 || !res.OOMKilled {
		t.Errorf("exec --json of the hog: exit %d, stdout %q (%v), stderr %q; want exit_code 137 and oom_killed true", code, out, err, errs)
	}
	if code, out, errs := rb("exec", "--json", id, "--", "exit 137"); !strings.Contains(out, `"oom_killed":false`) || code != 137 {
		t.Errorf("exec --json of exit 137: exit %d, %q, %q; want oom_killed false", code, out, errs)
	}
}

// TestCLINetworkHost: a local sandbox uses the host's network by default and
// with --network host: a listener on the host's loopback is reachable from
// inside. --network NET other than none, private or host is refused, before anything
// is made.
func TestCLINetworkHost(t *testing.T) {
	rb := localCLI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	token := fmt.Sprintf("net-%d", rand.Int64())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, token+"\n")
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// bash's /dev/tcp: no client program needed.
	read := fmt.Sprintf("exec 3</dev/tcp/127.0.0.1/%d && head -n1 <&3", port)
	for _, args := range [][]string{nil, {"--network", "host"}} {
		id := upLocal(t, rb, args...)
		if code, out, errs := rb("exec", id, "--", read); code != 0 || out != token+"\n" {
			t.Errorf("up %q: reading the host's loopback listener from inside: exit %d, %q, %q; want %q", args, code, out, errs, token)
		}
	}
	if code, _, errs := rb("up", "--network", "bridge"); code != cli.ExitStatusFailure || !strings.Contains(errs, "none, private or host") {
		t.Errorf("up --network bridge (local): exit %d, stderr %q; want 125 naming none, private and host", code, errs)
	}
}

// cliBinaries builds runbox and runboxd once for this package's tests that
// run the real binary, in a directory every user can read.
var cliBinaries struct {
	once sync.Once
	dir  string
}

// TestCLINoRootRefusesLimits: without root, a local sandbox with limits is
// refused with a reason (only root can make the cgroups), exit 125, and
// nothing is left behind (TestRootless shows the same user gets a sandbox
// without limits).
func TestCLINoRootRefusesLimits(t *testing.T) {
	needLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user")
	}
	dir, home, ws := nobodyDirs(t)
	for _, limit := range [][]string{{"--memory", "256M"}, {"--pids", "100"}, {"--cpus", "0.5"}} {
		cmd := osexec.Command(filepath.Join(dir, "runbox"), append(append([]string{"run"}, limit...), "--", "echo ran")...)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home,
			"RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd"), "DOCKER_HOST=unix://" + filepath.Join(home, "no-docker.sock")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		if code != cli.ExitStatusFailure || stdout.Len() != 0 || !strings.Contains(stderr.String(), "only root can make") {
			t.Errorf("runbox run %q as uid %d: %v, exit %d, stdout %q, stderr %q; want 125 and the reason", limit, nobody, err, code, stdout.String(), stderr.String())
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "sandboxes")); len(ents) > 1 { // the lock file
		t.Errorf("refused sandboxes left state behind: %v", ents)
	}
}

// TestCLIExecInterrupted: SIGINT (Ctrl-C) to a real `runbox exec` cancels
// the exec in the sandbox with the stop protocol: runbox says so, exits
// with the command's status (143 after SIGTERM), nothing the command started
// survives, and the sandbox serves the next command.
func TestCLIExecInterrupted(t *testing.T) {
	rb := localCLI(t)
	id := upLocal(t, rb)
	cliBinaries.once.Do(func() { cliBinaries.dir = providertest.BuildForAnyUser(t) })
	if cliBinaries.dir == "" {
		t.Fatal("runbox was not built")
	}
	// Only the sleeps carry the marker on their command line (not runbox's
	// argv, not the shell's).
	n := fmt.Sprintf("3136%06d", rand.IntN(1e6))
	m := "sleep " + n
	cmd := osexec.Command(filepath.Join(cliBinaries.dir, "runbox"), "exec", "--grace", "5s", id, "--", "n="+n+"; echo up; sleep $n & sleep $n")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "up\n" {
		t.Fatalf("runbox exec printed %q, %v; want up", line, err)
	}
	if !poll(time.Minute, func() bool { return countMarker(t, m) == 2 }) {
		t.Fatalf("%d of the 2 sleeps running a minute after up", countMarker(t, m))
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 || stderr.String() != "runbox: cancelled\n" {
		t.Errorf("runbox exec after SIGINT: %v, exit %d, stderr %q; want 143 and runbox: cancelled", err, code, stderr.String())
	}
	if n := countMarker(t, m); n != 0 {
		t.Errorf("%d of the command's processes survived Ctrl-C", n)
	}
	if code, out, errs := rb("exec", id, "--", "echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("exec after the interrupted one: exit %d, %q, %q", code, out, errs)
	}
}
