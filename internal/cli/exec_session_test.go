package cli_test

import (
	"path/filepath"
	"testing"
)

func TestExecSession(t *testing.T) {
	setHome(t)
	id := up(t)
	dir := t.TempDir()
	o := rb(t, "exec", "--session", "s1", id, "--", "cd "+dir+" && mkdir -p x && cd x; export A=1")
	if o.code != 0 || o.stdout != "" || o.stderr != "" {
		t.Errorf("first session exec: %+v; want exit 0 and no output", o)
	}
	o = rb(t, "exec", "--session", "s1", id, "--", `pwd; echo "$A"`)
	if want := filepath.Join(dir, "x") + "\n1\n"; o.code != 0 || o.stdout != want {
		t.Errorf("second session exec: %+v; want %q", o, want)
	}
	// Another session, and no session, are unaffected.
	o = rb(t, "exec", "--session", "s2", id, "--", `echo "A=$A"`)
	if o.stdout != "A=\n" {
		t.Errorf("other session: %+v", o)
	}
}
