package cli_test

import (
	"strings"
	"testing"
)

// TestExecBytesAndLimits: `runbox exec SB -- printf %s $'\xff'` prints the
// byte (it exited 125 with "sandbox lost: marshal message: string field
// contains invalid UTF-8"); an oversize command exits 125 naming the limit,
// not a lost sandbox; a reused --id with another command exits 125 naming
// the id, and with the same command attaches.
func TestExecBytesAndLimits(t *testing.T) {
	setHome(t)
	id := up(t)
	o := rb(t, "exec", id, "--", "printf", "%s", "\xff")
	if o.code != 0 || o.stdout != "\xff" {
		t.Errorf("exec -- printf %%s $'\\xff': %+v; want exit 0 and the byte 0xff", o)
	}
	o = rb(t, "exec", id, "--", "printf '%s' '\xfe\x80'")
	if o.code != 0 || o.stdout != "\xfe\x80" {
		t.Errorf("exec of a shell string that is not UTF-8: %+v", o)
	}
	o = rb(t, "exec", "-e", "V=\xff", id, "--", `printf '%s' "$V"`)
	if o.code != 0 || o.stdout != "\xff" {
		t.Errorf("exec -e V=$'\\xff': %+v", o)
	}

	o = rb(t, "exec", id, "--", "echo "+strings.Repeat("x", 2<<20))
	if o.code != 125 || !contains(o.stderr, "runbox.MaxCommandBytes", "2097157 bytes") || strings.Contains(o.stderr, "lost") {
		t.Errorf("exec of a 2 MiB command: exit %d, stderr %q; want 125 naming the limit and the size", o.code, o.stderr)
	}

	o = rb(t, "exec", "--id", "dup-1", id, "--", "echo first")
	if o.code != 0 || o.stdout != "first\n" {
		t.Fatalf("exec --id dup-1: %+v", o)
	}
	o = rb(t, "exec", "--id", "dup-1", id, "--", "echo second")
	if o.code != 125 || !contains(o.stderr, `"dup-1"`, "different command") || o.stdout != "" {
		t.Errorf("exec --id dup-1 with another command: %+v; want 125 naming the id, no output", o)
	}
	o = rb(t, "exec", "--id", "dup-1", id, "--", "echo first")
	if o.code != 0 || o.stdout != "first\n" {
		t.Errorf("exec --id dup-1 again with the same command: %+v; want it attached", o)
	}
}
