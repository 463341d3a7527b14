package registry

import (
	"context"
	"fmt"
)

// migrations are the schema's versions, in order: migrations[i] takes the
// database from version i to i+1 (SQLite's user_version). Never edit one
// that has shipped; append a new one.
var migrations = []string{
	// 1: tenants, tokens, sandboxes, audit.
	`CREATE TABLE tenants (
		name          TEXT PRIMARY KEY,
		created_ms    INTEGER NOT NULL,
		max_sandboxes INTEGER NOT NULL DEFAULT 0,
		max_execs     INTEGER NOT NULL DEFAULT 0
	);
	CREATE TABLE tokens (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL REFERENCES tenants(name),
		hash       TEXT NOT NULL UNIQUE,
		created_ms INTEGER NOT NULL,
		revoked_ms INTEGER NOT NULL DEFAULT 0
	);
	CREATE TABLE sandboxes (
		id           TEXT PRIMARY KEY,
		tenant       TEXT NOT NULL,
		name         TEXT,
		provider     TEXT NOT NULL,
		provider_id  TEXT NOT NULL,
		spec         TEXT NOT NULL,
		labels       TEXT NOT NULL DEFAULT '{}',
		workspace    TEXT NOT NULL DEFAULT '',
		state        TEXT NOT NULL,
		lost_reason  TEXT NOT NULL DEFAULT '',
		created_ms   INTEGER NOT NULL,
		last_used_ms INTEGER NOT NULL,
		recreated    INTEGER NOT NULL DEFAULT 0,
		UNIQUE (tenant, name)
	);
	CREATE TABLE audit (
		id           INTEGER PRIMARY KEY AUTOINCREMENT,
		tenant       TEXT NOT NULL,
		sandbox      TEXT NOT NULL,
		kind         TEXT NOT NULL,
		exec_id      TEXT NOT NULL DEFAULT '',
		command      TEXT NOT NULL DEFAULT '',
		started_ms   INTEGER NOT NULL,
		ended_ms     INTEGER NOT NULL DEFAULT 0,
		exit_code    INTEGER,
		signal       TEXT NOT NULL DEFAULT '',
		timed_out    INTEGER NOT NULL DEFAULT 0,
		cancelled    INTEGER NOT NULL DEFAULT 0,
		killed       INTEGER NOT NULL DEFAULT 0,
		stdout_bytes INTEGER NOT NULL DEFAULT 0,
		stderr_bytes INTEGER NOT NULL DEFAULT 0,
		outcome      TEXT NOT NULL DEFAULT '',
		detail       TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX audit_by_tenant ON audit (tenant, id);
	CREATE INDEX audit_by_sandbox ON audit (sandbox, exec_id);
	CREATE INDEX audit_open_execs ON audit (kind, ended_ms) WHERE ended_ms = 0;`,
	// 2: at most one unfinished row per exec, kept by an index, so that
	// opening an exec's row is one INSERT (ON CONFLICT DO NOTHING) rather
	// than a transaction that looks before it inserts. Rows that already
	// break the rule (none should: the transaction kept it) keep the oldest
	// open and end the others as duplicates.
	`UPDATE audit SET ended_ms = started_ms, outcome = 'lost', detail = 'duplicate of an open row of the same exec'
		WHERE kind = 'exec' AND ended_ms = 0 AND id NOT IN (
			SELECT MIN(id) FROM audit WHERE kind = 'exec' AND ended_ms = 0 GROUP BY sandbox, exec_id);
	CREATE UNIQUE INDEX audit_open_exec_once ON audit (sandbox, exec_id) WHERE kind = 'exec' AND ended_ms = 0;`,
	// 3: the server's own secrets (the key that signs port URLs), and the
	// ports of each sandbox exposed through the server's route.
	`CREATE TABLE server_secrets (
		name       TEXT PRIMARY KEY,
		value      BLOB NOT NULL,
		created_ms INTEGER NOT NULL
	);
	CREATE TABLE exposed_ports (
		sandbox    TEXT NOT NULL,
		port       INTEGER NOT NULL,
		created_ms INTEGER NOT NULL,
		PRIMARY KEY (sandbox, port)
	);`,
	// 4: whether each sandbox is paused (later: since when, see
	// Sandbox.PausedAt), and the tenants' snapshots: a
	// tenant's name for each, mapped to the provider's own (which no
	// tenant chooses or sees).
	`ALTER TABLE sandboxes ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
	CREATE TABLE snapshots (
		tenant        TEXT NOT NULL,
		name          TEXT NOT NULL,
		provider      TEXT NOT NULL,
		provider_name TEXT NOT NULL,
		sandbox       TEXT NOT NULL,
		created_ms    INTEGER NOT NULL,
		bytes         INTEGER NOT NULL DEFAULT 0,
		workspace     INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant, name),
		UNIQUE (provider, provider_name)
	);`,
	// 5: each exposure of a port holds a random nonce that its signed URLs
	// are bound to: unexposing the port drops it, so exposing the port
	// again never brings back a URL handed out before (rows from before
	// get one at their next exposure).
	`ALTER TABLE exposed_ports ADD COLUMN nonce TEXT NOT NULL DEFAULT '';`,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)

// migrate applies every migration past the database's user_version, each in
// its own transaction. A database from a newer runbox is refused rather
// than misread.
func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this runbox knows (%d): use a newer runbox", v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
	return nil
}

// Version returns the database's schema version.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}
