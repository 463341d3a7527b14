package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/registry"
)

// TestAuditExportCannotBeForged: a tenant's commands and exec ids land in
// the audit log as sent (it is a record), but `runbox audit`'s table,
// which an operator reads on a terminal, shows each row on one line with
// every control and formatting character written as an escape: a
// command carrying terminal escapes (clear screen, move to column 1 and
// erase the line), vertical tab, form feed, NEL, U+2028, a bidi override
// or a C1 CSI can neither rewrite the operator's screen nor print a row
// that looks like another tenant's. Each hostile command's random marker
// still shows (the control), and the JSON export keeps the bytes.
func TestAuditExportCannotBeForged(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	a := ts.tenant(t, "a")
	sb, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Remove(context.Background(), sb, true)
	marker := strings.ToLower(rand.Text())
	forged := "2026-01-01T00:00:00Z  b  sb-forged000  exec  -  0  exited  1ms  cat /etc/secret"
	hostile := map[string]string{
		"esc":  "\x1b[2J\x1b]0;pwned\x07\x1b[1G\x1b[2K" + forged,
		"vt":   "\v" + forged,
		"ff":   "\f" + forged,
		"cr":   "\r" + forged,
		"nel":  "\u0085" + forged,
		"ls":   "\u2028" + forged,
		"bidi": "\u202egnp.exe",
		"csi":  "\u009b2J",
		"del":  "\x7f\x08\x08" + forged,
		"tab":  "\tX\tY",
	}
	for what, tail := range hostile {
		res, _, err := a.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true # " + marker + "-" + what + tail})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("hostile command %s: %+v %v", what, res, err)
		}
	}
	// A hostile exec id: refused or run, its row must not forge either.
	a.Run(ctx, sb.ID, runbox.ExecSpec{ID: "ex-" + marker + "-id\x1b[1G\x1b[2K" + forged, Command: "true"})

	audit := func(args ...string) string {
		t.Helper()
		t.Setenv("RUNBOX_HOME", t.TempDir())
		var out, errOut bytes.Buffer
		if code := cli.Main(ctx, cli.ServerCommands{Make: servercli.Commands}, append([]string{"audit", "--db", filepath.Join(ts.home, "runbox.db")}, args...),
			strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("runbox audit %q: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	rows, err := ts.store.Audit(ctx, registry.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	table := audit()
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != len(rows)+1 {
		t.Errorf("runbox audit printed %d lines for %d rows and a header:\n%s", len(lines), len(rows), table)
	}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "2026-01-01T00:00:00Z") {
			t.Errorf("line %d is a forged row: %q", i, l)
		}
		for _, r := range l {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' || r == unicode.ReplacementChar {
				t.Errorf("line %d holds %U: %q", i, r, l)
				break
			}
		}
	}
	for what := range hostile {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, marker+"-"+what) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the %s command's marker is on %d lines of the table, want 1:\n%s", what, n, table)
		}
	}
	// The JSON export keeps the command as sent.
	if js := audit("--json"); !strings.Contains(js, marker+`-esc\u001b[2J`) {
		t.Errorf("the JSON export lost the command's bytes:\n%s", js)
	}
}
