package ssh_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/providertest"
)

// cliEnv is the real runbox binaries run as a user would against the
// test sshd, with the SSH setup in $HOME/.ssh.
type cliEnv struct {
	bins, home, rbHome string
	extra              []string // more environment, per call
}

// newCLIEnv makes a home whose .ssh holds the test sshd's client config
// and, with knownHosts, its known_hosts file.
func newCLIEnv(t testing.TB, e *testEnv, knownHosts bool) *cliEnv {
	t.Helper()
	bins := providertest.BuildForAnyUser(t)
	home, err := os.MkdirTemp("", "rbxh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	dotSSH := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(dotSSH, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{e.config: "config"}
	if knownHosts {
		files[e.knownHosts] = "known_hosts"
	}
	for src, dst := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dotSSH, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &cliEnv{bins: bins, home: home, rbHome: filepath.Join(home, "rb")}
}

func (c *cliEnv) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bins, "runbox"), args...)
	cmd.Env = append([]string{"HOME=" + c.home, "PATH=" + os.Getenv("PATH"), "RUNBOX_HOME=" + c.rbHome,
		"RUNBOX_RUNBOXD=" + filepath.Join(c.bins, "runboxd")}, c.extra...)
	return cmd
}

// cli is c.run as a providertest.CLI, for the suite's CLI helpers.
func (c *cliEnv) cli(t testing.TB) providertest.CLI {
	return func(args ...string) (int, string, string) { return c.run(t, args...) }
}

// run runs runbox with args and returns its status, stdout and stderr.
func (c *cliEnv) run(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	cmd := c.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("runbox %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// TestEndpoint drives the ssh sandbox's persistent endpoint through the
// real CLI: the first exec starts it and later ones reuse its one SSH
// connection (sshd logs one login); its socket is 0600 in a 0700
// directory; a killed endpoint leaves a stale socket the next exec
// replaces; a dropped SSH connection is made again by the same endpoint;
// it exits when idle, removing its socket; a runboxd killed on the host is
// exit 125 saying the sandbox is lost; a removed sandbox stops it and is
// "no such sandbox".
func TestEndpoint(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	c := newCLIEnv(t, e, true)
	c.extra = []string{endpoint.IdleEnv + "=5m"}
	code, stdout, stderr := c.run(t, "up", "--ssh", "rbx", "--name", "ep")
	if code != 0 {
		t.Fatalf("up: %d %s", code, stderr)
	}
	id := strings.TrimSpace(stdout)
	sock, err := endpoint.Socket(c.rbHome, "ssh", id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.run(t, "rm", "-f", id)
		if pid := providertest.EndpointPid(t, sock); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	logins := func() int { return countLog(t, e.sshd, "Accepted publickey") }
	exec3 := func(what string) {
		t.Helper()
		for i := range 3 {
			code, stdout, stderr := c.run(t, "exec", "ep", "--", "echo hi; exit 3")
			if code != 3 || stdout != "hi\n" {
				t.Fatalf("%s: exec %d: status %d, %q %q", what, i, code, stdout, stderr)
			}
			if stderr != "" {
				t.Logf("%s: exec %d: stderr %q", what, i, stderr)
			}
		}
	}

	before := logins()
	exec3("first use")
	if n := logins() - before; n != 1 {
		t.Errorf("3 execs made %d SSH logins; want 1 (the endpoint's)", n)
		logEndpointState(t, e, c, id)
	}
	pid := providertest.EndpointPid(t, sock)
	if pid == 0 {
		t.Fatal("no endpoint accepts on", sock)
	}
	for path, want := range map[string]os.FileMode{sock: 0o600, filepath.Dir(sock): 0o700} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want mode %v", path, fi.Mode(), err, want)
		}
	}

	// Killed: the socket file stays (stale); the next exec starts another.
	syscall.Kill(pid, syscall.SIGKILL)
	providertest.WaitGone(t, pid, "SIGKILL")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the killed endpoint's socket: %v (the test wants it stale)", err)
	}
	before = logins()
	exec3("after the endpoint was killed")
	pid2 := providertest.EndpointPid(t, sock)
	if pid2 == 0 || pid2 == pid {
		t.Errorf("endpoint after a kill: pid %d (was %d)", pid2, pid)
	}
	if n := logins() - before; n != 1 {
		t.Errorf("3 execs through a restarted endpoint made %d SSH logins; want 1", n)
		logEndpointState(t, e, c, id)
	}

	// The SSH connection dropped: the same endpoint connects again.
	if e.sshd.KillSessions() == 0 {
		t.Fatal("no sshd session to kill")
	}
	exec3("after the SSH connection dropped")
	if p := providertest.EndpointPid(t, sock); p != pid2 {
		t.Errorf("endpoint after a dropped connection: pid %d; want the same %d", p, pid2)
	}

	// Another user cannot use it, even with its permissions loosened.
	if os.Geteuid() == 0 {
		peek := `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.strerror); sys.exit(0)
try:
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    s.settimeout(30)
    print("got", repr(s.recv(100)))
except OSError as e:
    print("closed:", e.strerror)`
		stranger := func() string {
			cmd := exec.Command("/usr/bin/python3", "-c", peek, sock)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("python3 as uid 65534: %v: %s", err, out)
			}
			return strings.TrimSpace(string(out))
		}
		if out := stranger(); !strings.Contains(out, "Permission denied") {
			t.Errorf("uid 65534 connecting to the endpoint: %s; want permission denied", out)
		}
		// Every directory above the socket opened to others: only the
		// endpoint's own check is left.
		for _, d := range []string{c.home, c.rbHome, filepath.Dir(sock)} {
			os.Chmod(d, 0o755)
		}
		os.Chmod(sock, 0o666)
		if out := stranger(); out != "got b''" && !strings.HasPrefix(out, "closed:") {
			t.Errorf("uid 65534 connecting to the loosened endpoint: %s; want the connection closed unanswered", out)
		}
		for _, d := range []string{c.home, c.rbHome, filepath.Dir(sock)} {
			os.Chmod(d, 0o700)
		}
		os.Chmod(sock, 0o600)
		lb, _ := os.ReadFile(filepath.Join(endpoint.Dir(c.rbHome), "ssh-"+id+".log"))
		if !strings.Contains(string(lb), "is uid 65534") {
			t.Errorf("the endpoint's log does not say it refused uid 65534: %s", lb)
		}
	} else {
		t.Log("skipping the other-user check: it needs root to run a process as uid 65534")
	}

	// Killed mid-exec: the front's stream breaks; it dials the endpoint
	// again (a new one starts) and re-attaches by itself: every line once,
	// the command's status.
	{
		cmd := c.cmd("exec", "ep", "--", "for i in $(seq 1 40); do echo line $i; sleep 0.05; done; exit 3")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(stdout)
		first, _ := br.ReadString('\n')
		syscall.Kill(pid2, syscall.SIGKILL)
		rest, _ := io.ReadAll(br)
		code := 0
		if err := cmd.Wait(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		var want strings.Builder
		for i := 1; i <= 40; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		if got := first + string(rest); code != 3 || got != want.String() {
			t.Errorf("exec with its endpoint killed mid-output: status %d, stdout %q, stderr %q; want 3 and each line once", code, got, errb.String())
		}
		if pid2 = providertest.EndpointPid(t, sock); pid2 == 0 {
			t.Fatal("no endpoint after the re-attach")
		}
	}

	// Idle: an endpoint started with a short idle time exits by itself and
	// removes its socket.
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
	c.extra = []string{endpoint.IdleEnv + "=5m"}

	// runboxd killed on the host: a clear error, not a hang.
	exec3("before runboxd is killed")
	var rec struct{ Pid int }
	b, _ := os.ReadFile(filepath.Join(c.rbHome, "ssh", id, "sandbox.json"))
	if err := json.Unmarshal(b, &rec); err != nil || rec.Pid <= 0 {
		t.Fatalf("record: %v %s", err, b)
	}
	if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill runboxd %d: %v", rec.Pid, err)
	}
	code, stdout, stderr = c.run(t, "exec", "ep", "--", "echo hi")
	if code != 125 || stdout != "" || !strings.Contains(stderr, "sandbox lost") {
		t.Errorf("exec after runboxd was killed: status %d, %q %q; want 125, sandbox lost", code, stdout, stderr)
	}

	// Removed: the endpoint exits; exec says no such sandbox.
	pid4 := providertest.EndpointPid(t, sock)
	if code, _, stderr := c.run(t, "rm", "-f", "ep"); code != 0 {
		t.Fatalf("rm: %d %s", code, stderr)
	}
	if pid4 > 0 {
		providertest.WaitGone(t, pid4, "sandbox removed")
	}
	if code, _, stderr := c.run(t, "exec", id, "--", "true"); code != 125 || !strings.Contains(stderr, "no such sandbox") {
		t.Errorf("exec after rm: status %d, %q; want 125, no such sandbox", code, stderr)
	}
}

// logEndpointState logs what explains an unexpected SSH login: the
// endpoint's log and sshd's.
func logEndpointState(t *testing.T, e *testEnv, c *cliEnv, id string) {
	t.Helper()
	lb, _ := os.ReadFile(filepath.Join(endpoint.Dir(c.rbHome), "ssh-"+id+".log"))
	t.Logf("the endpoint's log:\n%s", lb)
	sb, _ := os.ReadFile(e.sshd.Log)
	t.Logf("sshd's log:\n%s", sb)
}
