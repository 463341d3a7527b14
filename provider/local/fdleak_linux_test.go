package local_test

import (
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
)

// TestLeakedDescriptorDoesNotReachCommands: a descriptor the caller left
// open without close-on-exec (here: this test process, which starts
// runboxd) on a fresh directory reaches neither runboxd (PID 1) nor a
// command, so /proc/*/fd/N cannot open the secret planted in it (security
// rule 3: before runboxd swept its inherited descriptors, it could).
func TestLeakedDescriptorDoesNotReachCommands(t *testing.T) {
	p := newProvider(t)
	leak := providertest.LeakDir(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	out := run(t, c, leak.ProbeCommand())
	if strings.Contains(out, leak.Secret) || strings.Contains(out, leak.Dir) {
		t.Fatalf("the leaked descriptor %d on %s reached the sandbox:\n%s", leak.FD, leak.Dir, out)
	}
	// A session's shell is started the same way; check it too.
	out = run(t, c, leak.ProbeCommand(), client.WithSession("s"))
	if strings.Contains(out, leak.Secret) || strings.Contains(out, leak.Dir) {
		t.Fatalf("the leaked descriptor %d on %s reached a session:\n%s", leak.FD, leak.Dir, out)
	}
}
