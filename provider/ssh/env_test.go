package ssh_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/loopbacksshd"
	"github.com/runbox/runbox/provider/ssh"
)

// testEnv is a test sshd and a client side for it
// (loopbacksshd.Client): an SSH config with aliases, a known_hosts file
// that knows the server, and a key it accepts.
//
//	rbx        user@127.0.0.1:port
//	rbx-jump   the same, as a jump host
//	rbx-via    the same host reached through rbx-jump (ProxyJump)
type testEnv struct {
	sshd       *loopbacksshd.Server
	client     *loopbacksshd.Client
	acct       loopbacksshd.Key
	user       string
	dir        string
	config     string
	knownHosts string
}

// newEnv starts a test sshd and writes a client side that logs in as
// userName.
func newEnv(t testing.TB, userName string) *testEnv {
	t.Helper()
	s := startSSHD(t)
	dir, err := os.MkdirTemp("", "rbx-sshc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := s.WriteClient(dir, userName)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{sshd: s, client: c, acct: s.Key, user: userName, dir: dir,
		config: c.Config, knownHosts: c.KnownHosts}
}

// provider returns a provider with its own short runbox home for target,
// closed (and its home removed) when t ends.
func (e *testEnv) provider(t testing.TB, target string) *ssh.Provider {
	t.Helper()
	home, err := os.MkdirTemp("", "rbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	p := &ssh.Provider{Home: home, Target: target, ConfigFile: e.config,
		KnownHostsFiles: []string{e.knownHosts}, AgentSocket: "none"}
	t.Cleanup(func() { p.Close() })
	return p
}

// create makes a sandbox, removed (with force) when t ends.
func create(t testing.TB, p *ssh.Provider, spec runbox.SandboxSpec) runbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Remove(ctx, sb, true)
	})
	return sb
}

// newClient returns a client to sb, closed when t ends.
func newClient(t testing.TB, p *ssh.Provider, sb runbox.Sandbox) *client.Client {
	t.Helper()
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	t.Cleanup(func() { c.Close() })
	return c
}
