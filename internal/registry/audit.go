package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Audit kinds.
const (
	KindExec     = "exec"
	KindCreate   = "create"
	KindDelete   = "delete"
	KindReap     = "reap"
	KindLost     = "lost"
	KindRecreate = "recreate"
	// KindExpose and KindUnexpose record a port opened or closed on the
	// server's route; KindEgress a runtime change of an egress policy.
	KindExpose   = "expose"
	KindUnexpose = "unexpose"
	KindEgress   = "egress"
	// KindEgressRefused records connections a private sandbox's egress
	// policy refused: one row per destination and rule, coalesced by the
	// host side (Detail: the egress.Refused line as JSON: host, port,
	// via, rule, count; Started and Ended: the first and last refusal).
	KindEgressRefused = "egress-refused"
	// KindPause and KindResume record a sandbox paused or resumed through
	// the server; KindSnapshot a snapshot taken of it (detail: its name)
	// and KindSnapshotDelete one removed.
	KindPause          = "pause"
	KindResume         = "resume"
	KindSnapshot       = "snapshot"
	KindSnapshotDelete = "snapshot-delete"
)

// Outcomes of an exec row.
const (
	OutcomeRunning   = ""          // not ended yet
	OutcomeExited    = "exited"    // ran to its end (any status)
	OutcomeTimedOut  = "timed_out" // stopped by its timeout
	OutcomeCancelled = "cancelled" // stopped by a cancel
	OutcomeRefused   = "refused"   // never ran (bad spec, spawn failure)
	OutcomeLost      = "lost"      // its sandbox was lost before the result was known
)

// AuditRow is one audit entry: an exec or a lifecycle call.
type AuditRow struct {
	ID                       int64
	Tenant                   string
	Sandbox                  string
	Kind                     string
	ExecID                   string
	Command                  string
	Started                  time.Time
	Ended                    time.Time // zero while an exec runs
	ExitCode                 *int      // nil until known
	Signal                   string
	TimedOut                 bool
	Cancelled                bool
	Killed                   int
	StdoutBytes, StderrBytes int64
	Outcome                  string
	Detail                   string
}

// ExecResult is what ends an exec's row.
type ExecResult struct {
	ExitCode                 int
	Signal                   string
	TimedOut, Cancelled      bool
	Killed                   int
	StdoutBytes, StderrBytes int64
	Outcome                  string
	Detail                   string
}

const auditCols = `id, tenant, sandbox, kind, exec_id, command, started_ms, ended_ms, exit_code, signal,
	timed_out, cancelled, killed, stdout_bytes, stderr_bytes, outcome, detail`

func scanAudit(row interface{ Scan(...any) error }) (AuditRow, error) {
	var a AuditRow
	var started, ended int64
	var code sql.NullInt64
	if err := row.Scan(&a.ID, &a.Tenant, &a.Sandbox, &a.Kind, &a.ExecID, &a.Command, &started, &ended, &code,
		&a.Signal, &a.TimedOut, &a.Cancelled, &a.Killed, &a.StdoutBytes, &a.StderrBytes, &a.Outcome, &a.Detail); err != nil {
		return AuditRow{}, err
	}
	a.Started, a.Ended = fromMs(started), fromMs(ended)
	if code.Valid {
		c := int(code.Int64)
		a.ExitCode = &c
	}
	return a, nil
}

// Lifecycle records a lifecycle call (create, delete, reap, lost, recreate)
// as one finished row.
func (s *Store) Lifecycle(ctx context.Context, tenant, sandbox, kind, detail string) error {
	now := ms(time.Now())
	_, err := s.db.ExecContext(ctx, lifecycleInsertQuery, tenant, sandbox, kind, now, now, detail)
	if err != nil {
		return fmt.Errorf("audit %s of %s: %w", kind, sandbox, err)
	}
	return nil
}

const (
	lifecycleInsertQuery = `INSERT INTO audit (tenant, sandbox, kind, started_ms, ended_ms, outcome, detail)
		VALUES (?, ?, ?, ?, ?, 'done', ?)`
	openExecFindQuery   = `SELECT id FROM audit WHERE sandbox = ? AND exec_id = ? AND kind = 'exec' AND ended_ms = 0`
	openExecInsertQuery = `INSERT INTO audit (tenant, sandbox, kind, exec_id, command, started_ms) VALUES (?, ?, 'exec', ?, ?, ?)
		ON CONFLICT (sandbox, exec_id) WHERE kind = 'exec' AND ended_ms = 0 DO NOTHING RETURNING id`
	finishExecQuery = `UPDATE audit SET ended_ms = ?, exit_code = ?, signal = ?, timed_out = ?,
		cancelled = ?, killed = ?, stdout_bytes = ?, stderr_bytes = ?, outcome = ?, detail = ?
		WHERE id = ? AND ended_ms = 0`
)

// AppendAudit records finished rows (their ID ignored) in one
// transaction: all or none.
func (s *Store) AppendAudit(ctx context.Context, rows []AuditRow) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer tx.Rollback()
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit (tenant, sandbox, kind, command, started_ms, ended_ms, outcome, detail)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, r.Tenant, r.Sandbox, r.Kind, r.Command, ms(r.Started), ms(r.Ended), r.Outcome, r.Detail); err != nil {
			return fmt.Errorf("audit %s of %s: %w", r.Kind, r.Sandbox, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// OpenExec returns the id of the unfinished row of exec in sandbox, or
// starts one; created says which.
func (s *Store) OpenExec(ctx context.Context, tenant, sandbox, execID, command string) (id int64, created bool, err error) {
	// One statement, no transaction, on the common path: the unique index
	// on open exec rows makes a second open of the same exec insert
	// nothing, and then the row that stopped it is the one to return.
	err = s.openExecInsert.QueryRowContext(ctx, tenant, sandbox, execID, command, ms(time.Now())).Scan(&id)
	if err == nil {
		return id, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, false, fmt.Errorf("audit exec %s: %w", execID, err)
	}
	err = s.openExecFind.QueryRowContext(ctx, sandbox, execID).Scan(&id)
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, false, fmt.Errorf("audit exec %s: find its open row: %w", execID, err)
	}
	// That row ended between the two statements: look and insert again
	// holding the write lock (the store's transactions are immediate), so
	// no other open or finish comes between them however busy it is.
	return s.openExecLocked(ctx, tenant, sandbox, execID, command)
}

// openExecLocked is OpenExec in one immediate transaction.
func (s *Store) openExecLocked(ctx context.Context, tenant, sandbox, execID, command string) (id int64, created bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, fmt.Errorf("audit exec %s: %w", execID, err)
	}
	defer tx.Rollback()
	err = tx.StmtContext(ctx, s.openExecFind).QueryRowContext(ctx, sandbox, execID).Scan(&id)
	switch {
	case err == nil:
	case errors.Is(err, sql.ErrNoRows):
		if err = tx.StmtContext(ctx, s.openExecInsert).QueryRowContext(ctx, tenant, sandbox, execID, command, ms(time.Now())).Scan(&id); err != nil {
			return 0, false, fmt.Errorf("audit exec %s: %w", execID, err)
		}
		created = true
	default:
		return 0, false, fmt.Errorf("audit exec %s: find its open row: %w", execID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("audit exec %s: %w", execID, err)
	}
	return id, created, nil
}

// FinishExec ends an exec's row with its result; a row already ended is
// left as it is (the first result recorded wins).
func (s *Store) FinishExec(ctx context.Context, id int64, r ExecResult) error {
	_, err := s.finishExecStmt.ExecContext(ctx, ms(time.Now()), r.ExitCode, r.Signal, r.TimedOut, r.Cancelled, r.Killed, r.StdoutBytes, r.StderrBytes,
		r.Outcome, r.Detail, id)
	if err != nil {
		return fmt.Errorf("audit exec row %d: %w", id, err)
	}
	return nil
}

// DropExec deletes an exec row that turned out not to be a new exec.
func (s *Store) DropExec(ctx context.Context, id int64) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM audit WHERE id = ? AND kind = 'exec' AND ended_ms = 0`, id)
	return err
}

// OpenExecs returns every exec row not yet ended, oldest first.
func (s *Store) OpenExecs(ctx context.Context) ([]AuditRow, error) {
	return s.queryAudit(ctx, `SELECT `+auditCols+` FROM audit WHERE kind = 'exec' AND ended_ms = 0 ORDER BY id`)
}

// AuditFilter selects audit rows; empty fields match everything.
type AuditFilter struct {
	Tenant, Sandbox string
	// Sandboxes, when not empty, keeps the rows of any of these sandbox
	// ids (a name several tenants use); Sandbox is then ignored.
	Sandboxes []string
	// Limit keeps the newest Limit rows (0: all).
	Limit int
}

// Audit returns the rows f selects, oldest first.
func (s *Store) Audit(ctx context.Context, f AuditFilter) ([]AuditRow, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1
	}
	if len(f.Sandboxes) > 0 {
		args := []any{f.Tenant, f.Tenant}
		for _, id := range f.Sandboxes {
			args = append(args, id)
		}
		args = append(args, limit)
		in := strings.TrimSuffix(strings.Repeat("?,", len(f.Sandboxes)), ",")
		return s.queryAudit(ctx, `SELECT * FROM (SELECT `+auditCols+` FROM audit
		WHERE (? = '' OR tenant = ?) AND sandbox IN (`+in+`) ORDER BY id DESC LIMIT ?) ORDER BY id`, args...)
	}
	return s.queryAudit(ctx, `SELECT * FROM (SELECT `+auditCols+` FROM audit
		WHERE (? = '' OR tenant = ?) AND (? = '' OR sandbox = ?) ORDER BY id DESC LIMIT ?) ORDER BY id`,
		f.Tenant, f.Tenant, f.Sandbox, f.Sandbox, limit)
}

// AuditRow returns the row with id.
func (s *Store) AuditRow(ctx context.Context, id int64) (AuditRow, error) {
	a, err := scanAudit(s.db.QueryRowContext(ctx, `SELECT `+auditCols+` FROM audit WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return AuditRow{}, ErrNotFound
	}
	return a, err
}

func (s *Store) queryAudit(ctx context.Context, q string, args ...any) ([]AuditRow, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		a, err := scanAudit(rows)
		if err != nil {
			return nil, fmt.Errorf("read audit: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
