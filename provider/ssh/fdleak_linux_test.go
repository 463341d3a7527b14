package ssh_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
)

// TestLeakedDescriptorDoesNotReachCommands (security rule 3 on ssh): a
// descriptor this process left open without close-on-exec before it
// started the test's sshd and the provider's connections (so the "remote"
// sshd, on this machine, inherits it too) reaches neither the remote
// runboxd nor its commands. It logs in as root, who could read the
// planted secret through the descriptor had it crossed.
func TestLeakedDescriptorDoesNotReachCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it logs in as root, who could read the planted secret through a leaked descriptor (CI runs as root)")
	}
	leak := providertest.LeakDir(t)
	e := newEnv(t, "root")
	p := e.provider(t, "rbx")
	sb := create(t, p, runbox.SandboxSpec{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := newClient(t, p, sb).Exec(ctx, leak.ProbeCommand())
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v, exit %d, stderr %q", err, res.ExitCode, res.Stderr)
	}
	// /proc/1 is this machine's init: only the command's own descriptors
	// and its runboxd's matter.
	if out := string(res.Stdout); strings.Contains(out, leak.Secret) || strings.Contains(out, leak.Dir) {
		t.Fatalf("the leaked descriptor %d on %s reached a command:\n%s", leak.FD, leak.Dir, out)
	}
	pid := sb.Detail["pid"]
	if pid == "" {
		t.Fatalf("no runboxd pid in the sandbox's detail: %v", sb.Detail)
	}
	if l, err := os.Readlink(fmt.Sprintf("/proc/%s/fd/%d", pid, leak.FD)); err == nil && l == leak.Dir {
		t.Fatalf("runboxd (pid %s) holds the leaked descriptor %d on %s", pid, leak.FD, leak.Dir)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%s", pid)); err != nil {
		t.Fatalf("runboxd (pid %s) is not on this machine: %v", pid, err)
	}
}
