// Package registry is runbox serve's store: tenants, token hashes, the
// sandbox registry and the audit log, in one SQLite file (a pure-Go driver,
// so binaries stay static; WAL, so `runbox audit` and `runbox token` read
// and write it while the server runs). Schema changes are versioned
// migrations (see migrations.go), applied in order when the file is opened.
package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/runbox/runbox"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Errors callers tell apart.
var (
	// ErrNotFound means no row has the given key.
	ErrNotFound = errors.New("not found")
	// ErrNameTaken means a tenant already has a sandbox by that name.
	ErrNameTaken = runbox.ErrNameInUse
)

// maxConns bounds the store's connections (SQLite serialises writers;
// readers run beside them in WAL mode).
const maxConns = 4

// Store is an open registry database. It is safe for concurrent use.
type Store struct {
	db *sql.DB
	// The statements of every API call, prepared once (parsing SQL cost
	// more than running it).
	authStmt, getSandboxStmt, openExecFind, openExecInsert, finishExecStmt *sql.Stmt
}

// prepare prepares the hot statements.
func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		stmt **sql.Stmt
		q    string
	}{
		{&s.authStmt, authQuery},
		{&s.getSandboxStmt, getSandboxQuery},
		{&s.openExecFind, openExecFindQuery},
		{&s.openExecInsert, openExecInsertQuery},
		{&s.finishExecStmt, finishExecQuery},
	} {
		st, err := s.db.PrepareContext(ctx, p.q)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", p.q, err)
		}
		*p.stmt = st
	}
	return nil
}

// Open opens (creating it if absent) the database at path and applies
// every pending migration. The file and its directory are private to the
// owner: they hold token hashes and every command run.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	// A fixed pool of connections that are never closed while the store is
	// open: SQLite keeps the file descriptors of a closed connection open
	// while another connection holds a lock on the same file, so a pool
	// that grows and shrinks under load would pile up descriptors.
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	if err := s.prepare(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		db.Close()
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// ms converts t to Unix milliseconds; the zero time is 0.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMs converts Unix milliseconds to a time; 0 is the zero time.
func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// nullString is "" for NULL.
func nullString(ns sql.NullString) string { return ns.String }

// orNull makes "" NULL.
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}
