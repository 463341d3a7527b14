package ssh_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/ssh"
)

// An alias whose ProxyJump is another alias: the provider connects to the
// jump host and, through a direct-tcpip channel the jump host opens, to the
// target (here the same loopback sshd, so the server's log shows the
// forwarding), and the sandbox works; so does a later provider that
// resolves the alias afresh.
func TestProxyJumpAlias(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx-via")
	sb := create(t, p, runbox.SandboxSpec{})
	if ep := sb.Detail["endpoint"]; !strings.Contains(ep, " via ") {
		t.Errorf("endpoint %q does not say it goes through the jump host", ep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := newClient(t, p, sb).Exec(ctx, "id -un")
	if err != nil || strings.TrimSpace(string(res.Stdout)) != e.user {
		t.Fatalf("exec through the jump host: %+v, %v; want user %s", res, err, e.user)
	}
	target := "127.0.0.1 port " + strconv.Itoa(e.sshd.Port)
	if n := countLog(t, e.sshd, "server_request_direct_tcpip: originator"); n == 0 {
		t.Errorf("the server's log shows no direct-tcpip channel to %s: the jump did not happen", target)
	}
	if n := countLog(t, e.sshd, "Accepted publickey"); n < 2 {
		t.Errorf("the server accepted %d login(s), want the jump host's and the target's", n)
	}
}

// A target given as user@host:port, with no alias, authenticated by
// ssh-agent alone (a real ssh-agent holding the only accepted key); without
// the agent the error says what was offered.
func TestAgentAndPlainTarget(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	sock := filepath.Join(e.dir, "agent.sock")
	agentCmd := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agentCmd.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	t.Cleanup(func() { agentCmd.Process.Kill(); agentCmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ssh-agent does not listen")
		}
		time.Sleep(20 * time.Millisecond)
	}
	add := exec.Command("ssh-add", e.acct.Path)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}
	target := e.user + "@" + e.sshd.Addr()
	p := e.provider(t, target)
	p.ConfigFile, p.AgentSocket = "none", sock
	sb := create(t, p, runbox.SandboxSpec{Workdir: "/tmp"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := newClient(t, p, sb).Exec(ctx, "pwd")
	if err != nil || string(res.Stdout) != "/tmp\n" {
		t.Fatalf("exec: %+v, %v; want /tmp", res, err)
	}

	q := e.provider(t, target)
	q.ConfigFile = "none"
	_, err = q.Create(ctx, runbox.SandboxSpec{})
	t.Logf("create without the agent: %v", err)
	if !errors.Is(err, ssh.ErrAuth) || !strings.Contains(err.Error(), e.user+"@"+e.sshd.Addr()) {
		t.Errorf("create without a usable key: %v; want ssh.ErrAuth naming %s@%s", err, e.user, e.sshd.Addr())
	}
}
