package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
)

// TestNoSetuidLeavesTheSandbox: whatever a command in a docker sandbox
// does in its bind-mounted workspace (chmod, install -m, open with
// O_CREAT, mkdir, tar x), no file there carries a setuid or setgid bit on
// the host (security rule 4: the commands' seccomp filter refuses the
// bits; before it, chmod 4755 left a -rwsr-xr-x root file in the host's
// directory).
func TestNoSetuidLeavesTheSandbox(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ws := t.TempDir()
	sb := create(t, p, runbox.SandboxSpec{Image: toolsImage, Workdir: ws})
	c := rbclient.New(p.Dialer(sb), rbclient.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, providertest.SetuidScript())
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckNoPrivilegeBits(t, ws, 3, string(res.Stdout)+string(res.Stderr))
}

// TestLeakedDescriptorDoesNotReachCommands: a descriptor the caller left
// open without close-on-exec on a fresh directory (here: this test
// process, which drives the engine) reaches neither runboxd nor a command
// in a docker sandbox (security rule 3).
func TestLeakedDescriptorDoesNotReachCommands(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	leak := providertest.LeakDir(t)
	sb := create(t, p, runbox.SandboxSpec{Workdir: t.TempDir()})
	c := rbclient.New(p.Dialer(sb), rbclient.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, leak.ProbeCommand())
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 {
		t.Fatalf("probe: exit %d\n%s", res.ExitCode, out)
	}
	if strings.Contains(out, leak.Secret) || strings.Contains(out, leak.Dir) {
		t.Fatalf("the leaked descriptor %d on %s reached the sandbox:\n%s", leak.FD, leak.Dir, out)
	}
}
