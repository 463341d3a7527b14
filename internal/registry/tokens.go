package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// tokenPrefix starts every token, so a leaked one is recognisable.
const tokenPrefix = "rbx_"

// Tenant is a tenant and its quotas (0: the server's default).
type Tenant struct {
	Name         string
	Created      time.Time
	MaxSandboxes int
	MaxExecs     int
}

// Token describes a token; the token itself is never stored, only its
// SHA-256.
type Token struct {
	ID      string
	Tenant  string
	Created time.Time
	Revoked time.Time // zero while valid
}

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckTenantName refuses names that are empty, long, or hold characters
// other than letters, digits, '.', '_' and '-'.
func CheckTenantName(name string) error {
	if !tenantName.MatchString(name) {
		return fmt.Errorf("tenant name %q: want 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// HashToken returns the stored form of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateToken makes a token for tenant (creating the tenant if it is new)
// and returns its id and the token, which is shown once and never stored.
func (s *Store) CreateToken(ctx context.Context, tenant string) (Token, string, error) {
	if err := CheckTenantName(tenant); err != nil {
		return Token{}, "", err
	}
	secret := make([]byte, 32)
	rand.Read(secret)
	idb := make([]byte, 6)
	rand.Read(idb)
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret)
	t := Token{ID: "tok_" + hex.EncodeToString(idb), Tenant: tenant, Created: time.Now()}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Token{}, "", fmt.Errorf("create token: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO tenants (name, created_ms) VALUES (?, ?) ON CONFLICT DO NOTHING`,
		tenant, ms(t.Created)); err != nil {
		return Token{}, "", fmt.Errorf("create token: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, tenant, hash, created_ms) VALUES (?, ?, ?, ?)`,
		t.ID, tenant, HashToken(token), ms(t.Created)); err != nil {
		return Token{}, "", fmt.Errorf("create token: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Token{}, "", fmt.Errorf("create token: %w", err)
	}
	return t, token, nil
}

const authQuery = `SELECT t.name, t.created_ms, t.max_sandboxes, t.max_execs
	FROM tokens k JOIN tenants t ON t.name = k.tenant WHERE k.hash = ? AND k.revoked_ms = 0`

// Authenticate returns the tenant a valid token belongs to; ErrNotFound
// for a token that is unknown or revoked.
func (s *Store) Authenticate(ctx context.Context, token string) (Tenant, error) {
	var t Tenant
	var created int64
	err := s.authStmt.QueryRowContext(ctx, HashToken(token)).Scan(&t.Name, &created, &t.MaxSandboxes, &t.MaxExecs)
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, ErrNotFound
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("authenticate: %w", err)
	}
	t.Created = fromMs(created)
	return t, nil
}

// ListTokens returns every token (revoked ones too), oldest first; tenant
// "" means all tenants.
func (s *Store) ListTokens(ctx context.Context, tenant string) ([]Token, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, tenant, created_ms, revoked_ms FROM tokens
		WHERE ? = '' OR tenant = ? ORDER BY created_ms, id`, tenant, tenant)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		var t Token
		var c, r int64
		if err := rows.Scan(&t.ID, &t.Tenant, &c, &r); err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		t.Created, t.Revoked = fromMs(c), fromMs(r)
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokeToken revokes the token with id; ErrNotFound when there is none.
// Revoking a revoked token is not an error.
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE tokens SET revoked_ms = CASE WHEN revoked_ms = 0 THEN ? ELSE revoked_ms END WHERE id = ?`,
		ms(time.Now()), id)
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("revoke token %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetQuotas sets a tenant's quotas (a negative value leaves one as it is;
// 0 means the server's default). ErrNotFound for an unknown tenant.
func (s *Store) SetQuotas(ctx context.Context, tenant string, maxSandboxes, maxExecs int) error {
	res, err := s.db.ExecContext(ctx, `UPDATE tenants SET
		max_sandboxes = CASE WHEN ? < 0 THEN max_sandboxes ELSE ? END,
		max_execs = CASE WHEN ? < 0 THEN max_execs ELSE ? END WHERE name = ?`,
		maxSandboxes, maxSandboxes, maxExecs, maxExecs, tenant)
	if err != nil {
		return fmt.Errorf("set quotas of %s: %w", tenant, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("set quotas of %s: %w", tenant, ErrNotFound)
	}
	return nil
}
