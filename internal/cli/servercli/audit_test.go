package servercli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/registry"
)

// TestAuditSandboxByName: runbox audit --sandbox takes a registered
// sandbox's name as well as its id, and a name nothing knows (a removed
// sandbox's, whose rows keep only the id) is an error, exit 125, that says
// to use the id, never an empty table. Before, a name printed nothing and
// exited 0.
func TestAuditSandboxByName(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "runbox.db")
	store, err := registry.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, sb := range []registry.Sandbox{
		{ID: "sb_alice1", Tenant: "alice", Name: "agent", Provider: "host", State: registry.StateReady, Created: now, LastUsed: now},
		{ID: "sb_bob1", Tenant: "bob", Name: "agent", Provider: "host", State: registry.StateReady, Created: now, LastUsed: now},
		{ID: "sb_alice2", Tenant: "alice", Name: "other", Provider: "host", State: registry.StateReady, Created: now, LastUsed: now},
	} {
		if err := store.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range [][3]string{{"alice", "sb_alice1", "ls"}, {"bob", "sb_bob1", "pwd"}, {"alice", "sb_alice2", "id"}, {"alice", "sb_gone", "rm"}} {
		if _, _, err := store.OpenExec(ctx, r[0], r[1], "e_"+r[1], r[2]); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	audit := func(args ...string) (cmds []string, stderr string, code int) {
		t.Helper()
		t.Setenv("RUNBOX_HOME", t.TempDir())
		var out, errOut bytes.Buffer
		code = cli.Main(ctx, cli.ServerCommands{Make: servercli.Commands}, append([]string{"audit", "--json", "--db", db}, args...), strings.NewReader(""), &out, &errOut)
		for l := range strings.Lines(out.String()) {
			var row struct{ Command string }
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Fatalf("audit line %q: %v", l, err)
			}
			cmds = append(cmds, row.Command)
		}
		return cmds, errOut.String(), code
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sandbox", "agent", "--tenant", "alice"}, "ls"},
		{[]string{"--sandbox", "agent"}, "ls,pwd"},
		{[]string{"--sandbox", "sb_bob1"}, "pwd"},
		{[]string{"--sandbox", "sb_gone"}, "rm"},
	} {
		cmds, stderr, code := audit(c.args...)
		if code != 0 || strings.Join(cmds, ",") != c.want {
			t.Errorf("audit %q: exit %d, commands %q, stderr %q; want %s", c.args, code, cmds, stderr, c.want)
		}
	}
	for _, args := range [][]string{{"--sandbox", "gone"}, {"--sandbox", "other", "--tenant", "bob"}} {
		cmds, stderr, code := audit(args...)
		if code != 125 || len(cmds) != 0 || !strings.Contains(stderr, "removed sandbox") || !strings.Contains(stderr, "id") {
			t.Errorf("audit %q: exit %d, commands %q, stderr %q; want 125 and an error suggesting the id", args, code, cmds, stderr)
		}
	}
}
