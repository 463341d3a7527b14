package registry

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func open(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runbox.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestTokensStoreOnlyHashes(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	tok, secret, err := s.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	tn, err := s.Authenticate(ctx, secret)
	if err != nil || tn.Name != "acme" {
		t.Fatalf("Authenticate = %+v, %v; want tenant acme", tn, err)
	}
	if _, err := s.Authenticate(ctx, secret+"x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("wrong token: %v, want ErrNotFound", err)
	}
	// The database file (and its WAL) never holds the token itself.
	s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	for _, f := range []string{path, path + "-wal"} {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(secret[4:])) {
			t.Fatalf("%s holds the token in clear", f)
		}
	}
	if err := s.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked token: %v, want ErrNotFound", err)
	}
	if err := s.RevokeToken(ctx, "tok_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	toks, _ := s.ListTokens(ctx, "")
	if len(toks) != 1 || toks[0].Revoked.IsZero() {
		t.Fatalf("ListTokens = %+v, want one revoked token", toks)
	}
	if _, _, err := s.CreateToken(ctx, "bad name!"); err == nil {
		t.Fatal("a tenant name with a space and '!' was accepted")
	}
}

func TestMigrationsAreVersionedAndReopenable(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	if v, _ := s.Version(ctx); v != SchemaVersion {
		t.Fatalf("version %d, want %d", v, SchemaVersion)
	}
	s.Close()
	s2, err := Open(ctx, path) // nothing left to apply
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.db.Exec("PRAGMA user_version = 99")
	s2.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, path); err == nil {
		t.Fatal("a database from a newer schema was opened")
	}
}

func TestSandboxesBelongToTheirTenant(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	now := time.Now()
	sb := Sandbox{ID: "sb1", Tenant: "a", Name: "web", Provider: "host", ProviderID: "p1", Spec: "{}",
		Labels: map[string]string{"k": "v"}, State: StateReady, Created: now, LastUsed: now}
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetSandbox(ctx, "a", "web"); err != nil || got.ID != "sb1" || got.Labels["k"] != "v" {
		t.Fatalf("get by name = %+v, %v", got, err)
	}
	if _, err := s.GetSandbox(ctx, "b", "sb1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other tenant's get: %v, want ErrNotFound", err)
	}
	sb.ID = "sb2"
	if err := s.InsertSandbox(ctx, sb); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("duplicate name: %v, want ErrNameTaken", err)
	}
	sb.Tenant = "b" // another tenant may use the name
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.CountSandboxes(ctx, "a"); n != 1 {
		t.Fatalf("tenant a has %d sandboxes, want 1", n)
	}
}

// A sandbox is never gone from the registry without its delete row in the
// audit log: a reader polling both while sandboxes are deleted never sees
// one without the other (serve's MCP test saw 19 delete rows for 20
// removed sandboxes when the row was written after the delete).
func TestDeleteSandboxWritesItsAuditRowAtOnce(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	const n = 40
	now := time.Now()
	for i := range n {
		sb := Sandbox{ID: fmt.Sprintf("sb%d", i), Tenant: "a", Name: fmt.Sprintf("n%d", i), Provider: "host",
			ProviderID: "p", Spec: "{}", State: StateReady, Created: now, LastUsed: now}
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	var deleting sync.WaitGroup
	for i := range n {
		deleting.Go(func() {
			if err := s.DeleteSandbox(ctx, "a", fmt.Sprintf("sb%d", i), KindDelete, "by test"); err != nil {
				t.Error(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { deleting.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		// Count the sandboxes first: a delete that lands between the two
		// reads only adds a row.
		left, err := s.CountSandboxes(ctx, "a")
		rows, err2 := s.Audit(ctx, AuditFilter{Tenant: "a"})
		if err := errors.Join(err, err2); err != nil {
			<-done
			t.Fatal(err)
		}
		if gone := n - left; len(rows) < gone {
			<-done
			t.Fatalf("%d sandboxes deleted, %d audit rows", gone, len(rows))
		}
	}
	rows, _ := s.Audit(ctx, AuditFilter{Tenant: "a"})
	if len(rows) != n || rows[0].Kind != KindDelete || rows[0].Detail != "by test" || rows[0].Sandbox == "" {
		t.Fatalf("%d rows, first %+v; want %d delete rows", len(rows), rows[0], n)
	}
}

func TestAuditExecRows(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	id, created, err := s.OpenExec(ctx, "a", "sb1", "e1", "echo hi")
	if err != nil || !created {
		t.Fatalf("OpenExec = %d, %v, %v", id, created, err)
	}
	again, created, err := s.OpenExec(ctx, "a", "sb1", "e1", "echo hi")
	if err != nil || created || again != id {
		t.Fatalf("reopen = %d, %v, %v; want the same row", again, created, err)
	}
	open, _ := s.OpenExecs(ctx)
	if len(open) != 1 {
		t.Fatalf("open execs: %d", len(open))
	}
	if err := s.FinishExec(ctx, id, ExecResult{ExitCode: 3, Outcome: OutcomeExited, StdoutBytes: 3}); err != nil {
		t.Fatal(err)
	}
	// The first result wins.
	s.FinishExec(ctx, id, ExecResult{ExitCode: 9, Outcome: OutcomeLost})
	row, _ := s.AuditRow(ctx, id)
	if row.ExitCode == nil || *row.ExitCode != 3 || row.Ended.IsZero() || row.Outcome != OutcomeExited {
		t.Fatalf("row = %+v", row)
	}
	s.Lifecycle(ctx, "b", "sb2", KindCreate, "")
	if rows, _ := s.Audit(ctx, AuditFilter{Tenant: "a"}); len(rows) != 1 {
		t.Fatalf("tenant a's rows: %d", len(rows))
	}
	if rows, _ := s.Audit(ctx, AuditFilter{}); len(rows) != 2 {
		t.Fatalf("all rows: %d", len(rows))
	}
}

// TestRecreatedSandboxNotMarkedLostForItsPredecessor: a caller that saw the
// old provider sandbox die marks the sandbox lost only if no recreate has
// replaced it since; otherwise the next call would recreate it again and
// wipe the fresh sandbox's workspace (seen as an SDK test's file vanishing
// right after a recreate).
func TestRecreatedSandboxNotMarkedLostForItsPredecessor(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	now := time.Now()
	sb := Sandbox{ID: "sb1", Tenant: "a", Provider: "host", ProviderID: "old", Spec: "{}",
		State: StateReady, Created: now, LastUsed: now}
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if marked, err := s.MarkLost(ctx, "sb1", "old", "runboxd gone"); err != nil || !marked {
		t.Fatalf("first mark = %v, %v; want marked", marked, err)
	}
	if marked, err := s.MarkLost(ctx, "sb1", "old", "again"); err != nil || marked {
		t.Fatalf("second mark of a lost sandbox = %v, %v; want not marked", marked, err)
	}
	if err := s.Recreated(ctx, "sb1", "new"); err != nil {
		t.Fatal(err)
	}
	if marked, err := s.MarkLost(ctx, "sb1", "old", "a late probe of the old one"); err != nil || marked {
		t.Fatalf("mark for the predecessor = %v, %v; want not marked", marked, err)
	}
	if got, err := s.GetSandbox(ctx, "a", "sb1"); err != nil || got.State != StateReady || got.ProviderID != "new" {
		t.Fatalf("after a late mark: %+v, %v; want ready on provider sandbox new", got, err)
	}
	if marked, err := s.MarkLost(ctx, "sb1", "new", "the new one died"); err != nil || !marked {
		t.Fatalf("mark of the current one = %v, %v; want marked", marked, err)
	}
}

// TestOpenExecConcurrent: many opens of one exec at once, with finishes
// racing them, never leave two open rows for it; every open returns an
// open row (or a fresh one after the last ended), and exactly the
// creators' rows exist.
func TestOpenExecConcurrent(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	for round := range 50 {
		exec := fmt.Sprintf("e%d", round)
		var wg sync.WaitGroup
		var created atomic.Int32
		for i := range 12 {
			wg.Go(func() {
				open := s.OpenExec
				if i%3 == 1 {
					// The path OpenExec takes when the row it found
					// ended meanwhile, which a busy machine reaches.
					open = s.openExecLocked
				}
				id, made, err := open(ctx, "a", "sb1", exec, "true")
				if err != nil {
					t.Error(err)
					return
				}
				if made {
					created.Add(1)
				}
				if i%4 == 0 {
					s.FinishExec(ctx, id, ExecResult{Outcome: OutcomeExited})
				}
			})
		}
		wg.Wait()
		rows, err := s.Audit(ctx, AuditFilter{Sandbox: "sb1"})
		if err != nil {
			t.Fatal(err)
		}
		open, mine := 0, 0
		for _, r := range rows {
			if r.ExecID != exec {
				continue
			}
			mine++
			if r.Ended.IsZero() {
				open++
			}
		}
		if open > 1 || mine != int(created.Load()) {
			t.Fatalf("round %d: %d rows (%d open) for %d creating opens", round, mine, open, created.Load())
		}
	}
}

// TestMigrationEndsDuplicateOpenRows: a version-1 database holding two
// open rows of one exec opens at the current version with the older row
// open and the other ended as a duplicate.
func TestMigrationEndsDuplicateOpenRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "runbox.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, migrations[0]+`; PRAGMA user_version = 1;
		INSERT INTO audit (tenant, sandbox, kind, exec_id, started_ms) VALUES ('a', 'sb1', 'exec', 'e1', 1), ('a', 'sb1', 'exec', 'e1', 2)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, _ := s.Version(ctx); v != SchemaVersion {
		t.Fatalf("version %d, want %d", v, SchemaVersion)
	}
	open, _ := s.OpenExecs(ctx)
	if len(open) != 1 || open[0].ID != 1 {
		t.Fatalf("open rows after migration: %+v", open)
	}
	if id, created, err := s.OpenExec(ctx, "a", "sb1", "e1", ""); err != nil || created || id != 1 {
		t.Fatalf("OpenExec after migration = %d, %v, %v; want the older row", id, created, err)
	}
}
