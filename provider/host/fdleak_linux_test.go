package host_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
)

// TestLeakedDescriptorDoesNotReachCommands: a descriptor this process left
// open without close-on-exec when it started runboxd reaches neither
// runboxd nor its commands (security rule 3; the host provider isolates
// nothing else, but runbox hands on no descriptor it did not mean to).
// Before runboxd swept its inherited descriptors, the command read the
// secret through /proc/self/fd/197.
func TestLeakedDescriptorDoesNotReachCommands(t *testing.T) {
	p := newProvider(t)
	leak := providertest.LeakDir(t)
	sb := create(t, p, runbox.SandboxSpec{Workdir: t.TempDir()})
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, leak.ProbeCommand())
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v, exit %d, stderr %q", err, res.ExitCode, res.Stderr)
	}
	// /proc/1 is the host's init here: only the command's own descriptors
	// and its daemon's matter.
	pid := pidOf(t, sb)
	out := string(res.Stdout)
	if strings.Contains(out, leak.Secret) || strings.Contains(out, leak.Dir) {
		t.Fatalf("the leaked descriptor %d on %s reached a command:\n%s", leak.FD, leak.Dir, out)
	}
	if l, err := readlinkFD(pid, leak.FD); err == nil && l == leak.Dir {
		t.Fatalf("runboxd (pid %d) holds the leaked descriptor %d on %s", pid, leak.FD, leak.Dir)
	}
}

func readlinkFD(pid, fd int) (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd))
}
