package servercli_test

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/registry"
)

// TestTokenCommands: runbox token create prints a token once (its id and
// how to revoke it on stderr) and sets only the quotas it is given; list
// shows every token, or a tenant's, with its revocation; revoke prints each
// id it revokes and stops at one it does not know; and each refuses what it
// cannot do, with its own message.
func TestTokenCommands(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "runbox.db")
	t.Setenv("RUNBOX_HOME", t.TempDir())
	token := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		var out, errOut bytes.Buffer
		code = cli.Main(ctx, cli.ServerCommands{Make: servercli.Commands}, append(append([]string{"token"}, args...), "--db", db), strings.NewReader(""), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	tenant := func(secret string) registry.Tenant {
		t.Helper()
		store, err := registry.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		tn, err := store.Authenticate(ctx, secret)
		if err != nil {
			t.Fatalf("authenticate %q: %v", secret, err)
		}
		return tn
	}

	if _, stderr, code := token("create"); code != 125 || !strings.Contains(stderr, "token create: --tenant is required") {
		t.Errorf("create without --tenant: exit %d, %q", code, stderr)
	}
	// createdID is the id in create's message about tenant's new token.
	createdID := func(stderr, tenant string) string {
		t.Helper()
		m := regexp.MustCompile(`^runbox: token (\S+) for tenant (\S+) \(shown once; revoke with runbox token revoke (\S+)\)\n$`).FindStringSubmatch(stderr)
		if m == nil || m[2] != tenant || m[1] != m[3] {
			t.Fatalf("create's message %q", stderr)
		}
		return m[1]
	}
	secret, stderr, code := token("create", "--tenant", "alice", "--max-sandboxes", "3")
	if code != 0 || !strings.HasPrefix(secret, "rbx_") || strings.Count(secret, "\n") != 1 {
		t.Fatalf("create: exit %d, stdout %q, stderr %q", code, secret, stderr)
	}
	aliceID := createdID(stderr, "alice")
	if tn := tenant(strings.TrimSpace(secret)); tn.Name != "alice" || tn.MaxSandboxes != 3 || tn.MaxExecs != 0 {
		t.Errorf("after create --max-sandboxes 3: %+v", tn)
	}
	// --max-execs alone leaves the sandbox limit as it was.
	secret2, _, code := token("create", "--tenant", "alice", "--max-execs", "5")
	if tn := tenant(strings.TrimSpace(secret2)); code != 0 || tn.MaxSandboxes != 3 || tn.MaxExecs != 5 {
		t.Errorf("after create --max-execs 5: exit %d, %+v", code, tn)
	}
	// Neither: the quotas stay.
	secret3, stderr, code := token("create", "--tenant", "bob")
	if tn := tenant(strings.TrimSpace(secret3)); code != 0 || tn.MaxSandboxes != 0 || tn.MaxExecs != 0 {
		t.Errorf("create for bob: exit %d, %+v", code, tn)
	}
	bobID := createdID(stderr, "bob")

	if _, stderr, code := token("revoke"); code != 125 || !strings.Contains(stderr, "revoke: expected at least one TOKEN_ID (see 'runbox token revoke --help')") {
		t.Errorf("revoke without ids: exit %d, %q", code, stderr)
	}
	out, stderr, code := token("revoke", aliceID, "tok_nosuch", bobID)
	if code != 125 || out != aliceID+"\n" || !strings.Contains(stderr, "token revoke: no token tok_nosuch (runbox token list shows them)") {
		t.Errorf("revoke %s tok_nosuch %s: exit %d, stdout %q, stderr %q; want the first revoked, then an error", aliceID, bobID, code, out, stderr)
	}

	out, _, code = token("list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 4 || !regexp.MustCompile(`^TOKEN ID +TENANT +CREATED +REVOKED$`).MatchString(lines[0]) {
		t.Fatalf("list: exit %d:\n%s", code, out)
	}
	revoked := map[string]bool{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 4 || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(f[2]) {
			t.Errorf("list row %q", l)
			continue
		}
		revoked[f[0]] = f[3] != "-"
	}
	if !revoked[aliceID] || revoked[bobID] || len(revoked) != 3 {
		t.Errorf("list: revoked %v; want %s alone of alice's first, and bob's %s live:\n%s", revoked, aliceID, bobID, out)
	}
	out, _, code = token("list", "--tenant", "bob")
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[1], bobID+" ") {
		t.Errorf("list --tenant bob: exit %d:\n%s", code, out)
	}
	if _, stderr, code := token("list", "extra"); code != 125 || stderr == "" {
		t.Errorf("list extra: exit %d, %q", code, stderr)
	}
}
