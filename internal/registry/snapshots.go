package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Snapshot is one registry row: a tenant's snapshot, by the tenant's name
// for it, and the provider's own name, which the tenant never chooses.
type Snapshot struct {
	Tenant       string
	Name         string
	Provider     string
	ProviderName string
	// Sandbox is the id of the sandbox it was taken of.
	Sandbox   string
	Created   time.Time
	Bytes     int64
	Workspace bool
}

const snapshotCols = `tenant, name, provider, provider_name, sandbox, created_ms, bytes, workspace`

func scanSnapshot(row interface{ Scan(...any) error }) (Snapshot, error) {
	var sn Snapshot
	var created int64
	if err := row.Scan(&sn.Tenant, &sn.Name, &sn.Provider, &sn.ProviderName, &sn.Sandbox, &created, &sn.Bytes, &sn.Workspace); err != nil {
		return Snapshot{}, err
	}
	sn.Created = fromMs(created)
	return sn, nil
}

// InsertSnapshot records a new snapshot. ErrNameTaken when its tenant has
// a snapshot of that name.
func (s *Store) InsertSnapshot(ctx context.Context, sn Snapshot) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?,?,?,?,?,?,?,?)`,
		sn.Tenant, sn.Name, sn.Provider, sn.ProviderName, sn.Sandbox, ms(sn.Created), sn.Bytes, sn.Workspace)
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: snapshots.tenant, snapshots.name") {
		return fmt.Errorf("snapshot name %q: %w", sn.Name, ErrNameTaken)
	}
	if err != nil {
		return fmt.Errorf("insert snapshot %s: %w", sn.Name, err)
	}
	return nil
}

// GetSnapshot returns tenant's snapshot name; ErrNotFound when the tenant
// has none of that name.
func (s *Store) GetSnapshot(ctx context.Context, tenant, name string) (Snapshot, error) {
	sn, err := scanSnapshot(s.db.QueryRowContext(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE tenant = ? AND name = ?`, tenant, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, ErrNotFound
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("get snapshot %s: %w", name, err)
	}
	return sn, nil
}

// ListSnapshots returns tenant's snapshots ("" for every tenant's), oldest
// first.
func (s *Store) ListSnapshots(ctx context.Context, tenant string) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+snapshotCols+` FROM snapshots
		WHERE ? = '' OR tenant = ? ORDER BY created_ms, name`, tenant, tenant)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// CountSnapshots counts tenant's snapshots.
func (s *Store) CountSnapshots(ctx context.Context, tenant string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM snapshots WHERE tenant = ?`, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count snapshots of %s: %w", tenant, err)
	}
	return n, nil
}

// DeleteSnapshot forgets tenant's snapshot name.
func (s *Store) DeleteSnapshot(ctx context.Context, tenant, name string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE tenant = ? AND name = ?`, tenant, name); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", name, err)
	}
	return nil
}

// Pause records that sandbox id was paused at at. A sandbox already
// paused keeps its first pause time: pausing it again does not restart
// the time its idle clock has been stopped.
func (s *Store) Pause(ctx context.Context, id string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET paused = CASE WHEN paused = 0 THEN ? ELSE paused END WHERE id = ?`,
		pausedMs(Sandbox{Paused: true, PausedAt: at}), id); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return nil
}

// Resume records that sandbox id is no longer paused and was last used at
// lastUsed: the caller moves its last use forward by the time it was
// paused, so that the pause does not count as idle time.
func (s *Store) Resume(ctx context.Context, id string, lastUsed time.Time) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET paused = 0, last_used_ms = ? WHERE id = ?`, ms(lastUsed), id); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	return nil
}
