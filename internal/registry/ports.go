package registry

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ServerSecret returns the server's secret called name, making it (32
// random bytes) the first time it is asked for. It lives only in the
// registry, which sits in the server's private home: no sandbox sees it.
func (s *Store) ServerSecret(ctx context.Context, name string) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("make secret %s: %w", name, err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO server_secrets (name, value, created_ms) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, name, fresh, time.Now().UnixMilli()); err != nil {
		return nil, fmt.Errorf("store secret %s: %w", name, err)
	}
	var v []byte
	if err := s.db.QueryRowContext(ctx, `SELECT value FROM server_secrets WHERE name = ?`, name).Scan(&v); err != nil {
		return nil, fmt.Errorf("read secret %s: %w", name, err)
	}
	return v, nil
}

// SandboxByID returns the sandbox whose id is id, whatever its tenant;
// ErrNotFound when there is none. Only a caller that has already bound
// the request to the sandbox's tenant (a signed URL) may use it.
func (s *Store) SandboxByID(ctx context.Context, id string) (Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, ErrNotFound
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// SetSpec replaces the stored spec (JSON) of sandbox id.
func (s *Store) SetSpec(ctx context.Context, id, spec string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET spec = ? WHERE id = ?`, spec, id); err != nil {
		return fmt.Errorf("set spec of sandbox %s: %w", id, err)
	}
	return nil
}

// ExposePort records that port of sandbox may be reached through the
// server's route, and returns the exposure's nonce, which the port's
// signed URLs are bound to: a fresh random one for a port not exposed, the
// one in force for a port exposed already (the URLs handed out for it stay
// good until UnexposePort).
func (s *Store) ExposePort(ctx context.Context, sandbox string, port int) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("expose port %d of sandbox %s: %w", port, sandbox, err)
	}
	fresh := hex.EncodeToString(b[:])
	var nonce string
	if err := s.db.QueryRowContext(ctx, `INSERT INTO exposed_ports (sandbox, port, created_ms, nonce) VALUES (?, ?, ?, ?)
		ON CONFLICT (sandbox, port) DO UPDATE SET nonce = CASE WHEN nonce = '' THEN excluded.nonce ELSE nonce END
		RETURNING nonce`, sandbox, port, time.Now().UnixMilli(), fresh).Scan(&nonce); err != nil {
		return "", fmt.Errorf("expose port %d of sandbox %s: %w", port, sandbox, err)
	}
	return nonce, nil
}

// UnexposePort forgets that port of sandbox was exposed, and with it the
// exposure's nonce (every signed URL handed out for it); it reports
// whether it was.
func (s *Store) UnexposePort(ctx context.Context, sandbox string, port int) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM exposed_ports WHERE sandbox = ? AND port = ?`, sandbox, port)
	if err != nil {
		return false, fmt.Errorf("unexpose port %d of sandbox %s: %w", port, sandbox, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// PortExposure reports whether port of sandbox is exposed, and the
// exposure's nonce ("" for a row from before nonces, which no signed URL
// matches).
func (s *Store) PortExposure(ctx context.Context, sandbox string, port int) (nonce string, exposed bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT nonce FROM exposed_ports WHERE sandbox = ? AND port = ?`, sandbox, port).Scan(&nonce)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("port %d of sandbox %s: %w", port, sandbox, err)
	}
	return nonce, true, nil
}

// ExposedPorts returns the exposed ports of sandbox, ascending.
func (s *Store) ExposedPorts(ctx context.Context, sandbox string) ([]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT port FROM exposed_ports WHERE sandbox = ? ORDER BY port`, sandbox)
	if err != nil {
		return nil, fmt.Errorf("exposed ports of sandbox %s: %w", sandbox, err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("exposed ports of sandbox %s: %w", sandbox, err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
