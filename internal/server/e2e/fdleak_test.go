package e2e_test

import (
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
)

// TestServeLeaksNoDescriptor: a descriptor left open without close-on-exec
// by whoever started `runbox serve` (here: this test, on a fresh directory
// at a random path holding a fresh secret) reaches neither a command of a
// sandbox the server makes nor that command's runboxd (security rule 3:
// serve marks everything past stdio close-on-exec as it starts, and runboxd
// sweeps what it inherits).
func TestServeLeaksNoDescriptor(t *testing.T) {
	leak := providertest.LeakDir(t)
	sp := startServe(t)
	srv := sp.server("fdleak")
	ctx := ctxT(t)
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	probe := leak.ProbeCommand() + "\nls -l /proc/$PPID/fd 2>&1; for f in /proc/$PPID/fd/*; do cat $f/" + leak.Name + " 2>/dev/null; done; true"
	res, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: probe})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 {
		t.Fatalf("probe: exit %d\n%s", res.ExitCode, out)
	}
	if strings.Contains(out, leak.Secret) || strings.Contains(out, leak.Dir) {
		t.Fatalf("the descriptor %d on %s, left open by serve's caller, reached a command or its runboxd:\n%s", leak.FD, leak.Dir, out)
	}
	// The probe saw runboxd's descriptors (its parent): the check is real.
	if !strings.Contains(out, "socket:") {
		t.Fatalf("the probe listed no descriptor of runboxd:\n%s", out)
	}
}
