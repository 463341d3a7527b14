package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sandbox states.
const (
	StateReady = "ready"
	StateLost  = "lost"
)

// Sandbox is one registry row: a tenant's sandbox and where it lives.
type Sandbox struct {
	ID         string
	Tenant     string
	Name       string
	Provider   string
	ProviderID string
	// Spec is the create request as the server stores it (JSON).
	Spec       string
	Labels     map[string]string
	Workspace  string // a workspace the server made for it ("" if none)
	State      string
	LostReason string
	Created    time.Time
	LastUsed   time.Time
	Recreated  int
	// Paused says the sandbox was paused through the server.
	Paused bool
	// PausedAt is when it was paused (zero when it is not, or when a
	// registry from before pause times were kept paused it): its idle
	// clock stops from then until it is resumed (see Resume). The column
	// paused holds it, in ms since the epoch; 1 is paused at an unknown
	// time.
	PausedAt time.Time
}

// pausedMs is the paused column's value for sb.
func pausedMs(sb Sandbox) int64 {
	switch {
	case !sb.Paused:
		return 0
	case sb.PausedAt.IsZero():
		return 1
	}
	return max(ms(sb.PausedAt), 2)
}

const sandboxCols = `id, tenant, name, provider, provider_id, spec, labels, workspace, state, lost_reason, created_ms, last_used_ms, recreated, paused`

func scanSandbox(row interface{ Scan(...any) error }) (Sandbox, error) {
	var sb Sandbox
	var name sql.NullString
	var labels string
	var created, used, paused int64
	if err := row.Scan(&sb.ID, &sb.Tenant, &name, &sb.Provider, &sb.ProviderID, &sb.Spec, &labels,
		&sb.Workspace, &sb.State, &sb.LostReason, &created, &used, &sb.Recreated, &paused); err != nil {
		return Sandbox{}, err
	}
	sb.Paused = paused != 0
	if paused > 1 {
		sb.PausedAt = fromMs(paused)
	}
	sb.Name = nullString(name)
	sb.Created, sb.LastUsed = fromMs(created), fromMs(used)
	if err := json.Unmarshal([]byte(labels), &sb.Labels); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s labels: %w", sb.ID, err)
	}
	return sb, nil
}

// InsertSandbox records a new sandbox. ErrNameTaken when its tenant has a
// sandbox of that name.
func (s *Store) InsertSandbox(ctx context.Context, sb Sandbox) error {
	labels, err := json.Marshal(sb.Labels)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	if sb.Labels == nil {
		labels = []byte("{}")
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		sb.ID, sb.Tenant, orNull(sb.Name), sb.Provider, sb.ProviderID, sb.Spec, string(labels), sb.Workspace,
		sb.State, sb.LostReason, ms(sb.Created), ms(sb.LastUsed), sb.Recreated, pausedMs(sb))
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: sandboxes.tenant, sandboxes.name") {
		return fmt.Errorf("sandbox name %q: %w", sb.Name, ErrNameTaken)
	}
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// NameTaken reports whether tenant has a sandbox called name.
func (s *Store) NameTaken(ctx context.Context, tenant, name string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE tenant = ? AND name = ?`, tenant, name).Scan(&n)
	return n > 0, err
}

const getSandboxQuery = `SELECT ` + sandboxCols + ` FROM sandboxes
	WHERE tenant = ? AND (id = ? OR name = ?) ORDER BY id = ? DESC LIMIT 1`

// GetSandbox returns tenant's sandbox whose id or name is key; ErrNotFound
// when it has none (another tenant's sandbox included).
func (s *Store) GetSandbox(ctx context.Context, tenant, key string) (Sandbox, error) {
	sb, err := scanSandbox(s.getSandboxStmt.QueryRowContext(ctx, tenant, key, key, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", key, err)
	}
	return sb, nil
}

// ListSandboxes returns tenant's sandboxes ("" for every tenant's),
// oldest first.
func (s *Store) ListSandboxes(ctx context.Context, tenant string) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes
		WHERE ? = '' OR tenant = ? ORDER BY created_ms, id`, tenant, tenant)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// CountSandboxes counts tenant's sandboxes.
func (s *Store) CountSandboxes(ctx context.Context, tenant string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sandboxes WHERE tenant = ?`, tenant).Scan(&n)
	return n, err
}

// MarkLost records that a sandbox's runboxd is gone, and why, if the
// sandbox is still the provider's sandbox providerID and not yet lost. It
// reports whether it marked it: a sandbox recreated since the caller read
// it (a new provider id) is never marked lost for its predecessor's death.
func (s *Store) MarkLost(ctx context.Context, id, providerID, reason string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET state = ?, lost_reason = ?
		WHERE id = ? AND provider_id = ? AND state != ?`, StateLost, reason, id, providerID, StateLost)
	if err != nil {
		return false, fmt.Errorf("mark sandbox %s lost: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("mark sandbox %s lost: %w", id, err)
	}
	return n == 1, nil
}

// Recreated records that a lost sandbox was replaced by the provider's
// sandbox providerID.
func (s *Store) Recreated(ctx context.Context, id, providerID string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET state = ?, lost_reason = '', provider_id = ?,
		recreated = recreated + 1, paused = 0, last_used_ms = ? WHERE id = ?`, StateReady, providerID, ms(time.Now()), id)
	if err != nil {
		return fmt.Errorf("record sandbox %s recreated: %w", id, err)
	}
	return nil
}

// Touch records a sandbox's last use.
func (s *Store) Touch(ctx context.Context, id string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET last_used_ms = MAX(last_used_ms, ?) WHERE id = ?`, ms(at), id)
	if err != nil {
		return fmt.Errorf("touch sandbox %s: %w", id, err)
	}
	return nil
}

// DeleteSandbox forgets tenant's sandbox id and records why in the audit
// log (a row of kind with detail), in one transaction: no reader ever
// sees the sandbox gone without its audit row, or the row without the
// sandbox gone.
func (s *Store) DeleteSandbox(ctx context.Context, tenant, id, kind, detail string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM exposed_ports WHERE sandbox = ?`, id); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	now := ms(time.Now())
	if _, err := tx.ExecContext(ctx, lifecycleInsertQuery, tenant, id, kind, now, now, detail); err != nil {
		return fmt.Errorf("delete sandbox %s: audit %s: %w", id, kind, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}
