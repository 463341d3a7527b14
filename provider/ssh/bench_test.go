package ssh_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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
	// The CLI reads the client side where ssh would: ~/.ssh.
	if err := os.Mkdir(filepath.Join(home, ".ssh"), 0o700); err != nil {
		b.Fatal(err)
	}
	if _, err := e.sshd.WriteClient(filepath.Join(home, ".ssh"), e.user); err != nil {
		b.Fatal(err)
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
	o, err := e.client.OpenSSH("")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if out, err := o.Command("true").CombinedOutput(); err != nil {
			b.Fatalf("ssh: %v: %s", err, out)
		}
	}
}

// BenchmarkSSHControlMaster is `ssh host true` through an OpenSSH
// ControlMaster connection opened before the loop.
func BenchmarkSSHControlMaster(b *testing.B) {
	e := newEnv(b, nonRootUser(b))
	m, err := e.client.OpenControlMaster(filepath.Join(e.dir, "ctl.sock"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	for b.Loop() {
		if out, err := m.Command("true").CombinedOutput(); err != nil {
			b.Fatalf("ssh: %v: %s", err, out)
		}
	}
}
