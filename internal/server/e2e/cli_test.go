package e2e_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCLIThroughServer runs the same runbox commands on this machine and
// through the server (RUNBOX_HOST + RUNBOX_TOKEN): output, errors and exit
// codes are the same, sandbox ids aside.
func TestCLIThroughServer(t *testing.T) {
	sp := startServe(t)
	remote := []string{"RUNBOX_HOST=" + sp.url, "RUNBOX_TOKEN=" + sp.token("cli")}
	localHome, err := os.MkdirTemp("", "rbl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(localHome)
	local := []string{"RUNBOX_HOME=" + localHome, "RUNBOX_PROVIDER=host"}

	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "sub", "a.txt"), []byte("synced\n"), 0o644)
	file := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(file, []byte("copied in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := regexp.MustCompile(`\b(sb-[0-9a-f]{12}|[0-9a-f]{12})\b`)
	// cp and sync's summary line says how long the copy took.
	took := regexp.MustCompile(` in [0-9.]+(ns|µs|ms|s)\b`)
	type result struct {
		stdout, stderr string
		code           int
	}
	run := func(env []string, sb string, args ...string) result {
		for i, a := range args {
			args[i] = strings.ReplaceAll(a, "SB", sb)
		}
		o, e, code := sp.runbox(env, args...)
		// This machine has no docker engine for these tests; the local
		// CLI says so where the server (which holds only host) does not.
		e = strings.ReplaceAll(e, " (not searched: docker, unavailable here; runbox ls says why)", "")
		e = took.ReplaceAllString(e, " in TIME")
		return result{ids.ReplaceAllString(o, "ID"), ids.ReplaceAllString(e, "ID"), code}
	}
	up := func(env []string) string {
		args := []string{"up", "--workdir", t.TempDir()}
		if env[0] == remote[0] {
			args = []string{"up"} // the server makes a fresh workspace
		}
		o, e, code := sp.runbox(env, args...)
		if code != 0 {
			t.Fatalf("up: %d %s", code, e)
		}
		return strings.TrimSpace(o)
	}
	lsb, rsb := up(local), up(remote)
	defer sp.runbox(local, "rm", "-f", lsb)
	for _, args := range [][]string{
		{"exec", "SB", "--", "echo out; echo err >&2; exit 3"},
		{"exec", "SB", "--", "printf", "%s|", "an", "argv"},
		{"exec", "--timeout", "500ms", "SB", "--", "sleep 30"},
		{"exec", "--session", "s", "SB", "--", "cd /tmp && export V=kept"},
		{"exec", "--session", "s", "SB", "--", "echo $PWD $V"},
		{"exec", "-e", "A=b", "--cwd", "/", "SB", "--", "echo $A; pwd"},
		{"exec", "--detach", "--id", "bg1", "SB", "--", "echo from background; exit 4"},
		{"attach", "SB", "bg1"},
		{"cancel", "SB", "never-started"},
		{"exec", "--id", "never-started", "SB", "--", "echo must not run"},
		{"exec", "-i", "SB", "--", "cat"},
		{"cp", file, "SB:/tmp/in-SB.txt"},
		{"exec", "SB", "--", "cat /tmp/in-SB.txt"},
		{"sync", "-q", tree, "SB:/tmp/tree-SB"},
		{"exec", "SB", "--", "cat /tmp/tree-SB/sub/a.txt"},
		{"kill", "-s", "TERM", "SB", "bg1"},
		{"exec", "nosuchsandbox", "--", "true"},
		{"exec", "SB", "--", "/no/such/binary"},
		{"attach", "SB", "no-such-exec"},
		{"rm", "nosuchsandbox"},
	} {
		l := run(local, lsb, append([]string(nil), args...)...)
		r := run(remote, rsb, append([]string(nil), args...)...)
		if l != r {
			t.Errorf("runbox %q:\nlocal:  %+v\nserver: %+v", args, l, r)
		}
	}
	if o, e, code := sp.runbox(remote, "ls"); code != 0 || !strings.Contains(o, rsb) || strings.Contains(o, lsb) {
		t.Errorf("ls through the server: %d %q %q", code, o, e)
	}
	if o, _, code := sp.runbox(remote, "rm", rsb); code != 0 || strings.TrimSpace(o) != rsb {
		t.Errorf("rm through the server: %d %q", code, o)
	}
	// A wrong token: unauthenticated, status 125.
	if _, e, code := sp.runbox([]string{"RUNBOX_HOST=" + sp.url, "RUNBOX_TOKEN=nope"}, "ls"); code != 125 || !strings.Contains(e, "unauthenticated") {
		t.Errorf("ls with a wrong token: %d %q", code, e)
	}
}
