package ssh_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/providertest"
)

// The benchmarks compare what one command costs on a remote host (here the
// loopback sshd, as a plain user), run in one process so they share the
// machine's state (issue 18's goal: an exec on an ssh sandbox at least 10×
// faster than a fresh `ssh host true`, and no slower than one through an
// OpenSSH ControlMaster):
//
//	go test -run '^$' -bench . -count 5 ./provider/ssh/ | benchstat -
//
// docs/performance.md records the figures.

// BenchmarkExecOnSandbox is Exec("true") through the Go client on an ssh
// sandbox: one SSH connection, already open, carries every call.
func BenchmarkExecOnSandbox(b *testing.B) {
	e := newEnv(b, nonRootUser(b))
	p := e.provider(b, "rbx")
	sb := create(b, p, runbox.SandboxSpec{})
	c := newClient(b, p, sb)
	ctx := context.Background()
	if _, err := c.Exec(ctx, "true"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := c.Exec(ctx, "true")
		if err != nil || !res.OK() {
			b.Fatalf("exec: %+v, %v", res, err)
		}
	}
}

// BenchmarkCLIExecOnSandbox is `runbox exec SANDBOX -- true`, a fresh
// runbox process per command: through the sandbox's persistent endpoint
// (a local dial; the endpoint holds the SSH connection), and, as
// "/no-endpoint", with endpoints off ($RUNBOX_ENDPOINT_IDLE=off: runbox-full
// makes an SSH connection per command).
func BenchmarkCLIExecOnSandbox(b *testing.B) {
	b.Run("endpoint", func(b *testing.B) { benchCLIExec(b, "") })
	b.Run("no-endpoint", func(b *testing.B) { benchCLIExec(b, "off") })
}

func benchCLIExec(b *testing.B, idle string) {
	e := newEnv(b, nonRootUser(b))
	bins := providertest.BuildForAnyUser(b)
	home := filepath.Dir(e.config)
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "RUNBOX_HOME=" + filepath.Join(home, "rb"),
		"RUNBOX_RUNBOXD=" + filepath.Join(bins, "runboxd")}
	if idle != "" {
		env = append(env, endpoint.IdleEnv+"="+idle)
	}
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		b.Fatal(err)
	}
	for _, f := range []string{"config", "known_hosts"} {
		data, err := os.ReadFile(filepath.Join(home, f))
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, ".ssh", f), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	run := func(args ...string) string {
		cmd := exec.Command(filepath.Join(bins, "runbox"), args...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("runbox %v: %v", args, err)
		}
		return string(out)
	}
	run("up", "--ssh", "rbx", "--name", "bench")
	b.Cleanup(func() { exec.Command(filepath.Join(bins, "runbox"), "rm", "-f", "bench").Run() })
	run("exec", "bench", "--", "true") // starts the endpoint
	for b.Loop() {
		run("exec", "bench", "--", "true")
	}
	cmd := exec.Command(filepath.Join(bins, "runbox"), "rm", "bench")
	cmd.Env = env
	cmd.Run()
}

// BenchmarkSSHFresh is `ssh host true` with a fresh connection each time:
// what an SSH backend that wraps each command in an ssh invocation pays.
func BenchmarkSSHFresh(b *testing.B) {
	e := newEnv(b, nonRootUser(b))
	cfg := opensshConfig(b, e, "")
	for b.Loop() {
		if out, err := exec.Command("ssh", "-F", cfg, "rbx", "true").CombinedOutput(); err != nil {
			b.Fatalf("ssh: %v: %s", err, out)
		}
	}
}

// BenchmarkSSHControlMaster is `ssh host true` through an OpenSSH
// ControlMaster connection opened before the loop.
func BenchmarkSSHControlMaster(b *testing.B) {
	e := newEnv(b, nonRootUser(b))
	ctl := filepath.Join(e.dir, "ctl.sock")
	cfg := opensshConfig(b, e, "  ControlMaster auto\n  ControlPath "+ctl+"\n  ControlPersist 10m\n")
	if out, err := exec.Command("ssh", "-F", cfg, "rbx", "true").CombinedOutput(); err != nil {
		b.Fatalf("ssh (opening the master): %v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("ssh", "-F", cfg, "-O", "exit", "rbx").Run() })
	for b.Loop() {
		if out, err := exec.Command("ssh", "-F", cfg, "rbx", "true").CombinedOutput(); err != nil {
			b.Fatalf("ssh: %v: %s", err, out)
		}
	}
}

// opensshConfig writes a config for the OpenSSH client: the env's alias,
// its known_hosts, no prompts, and extra lines.
func opensshConfig(b *testing.B, e *testEnv, extra string) string {
	b.Helper()
	cfg := filepath.Join(e.dir, fmt.Sprintf("openssh-%d.conf", time.Now().UnixNano()))
	conf := fmt.Sprintf("Host rbx\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n  IdentitiesOnly yes\n  UserKnownHostsFile %s\n  BatchMode yes\n  LogLevel ERROR\n%s",
		e.sshd.port, e.user, e.acct.key, e.knownHosts, extra)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}
