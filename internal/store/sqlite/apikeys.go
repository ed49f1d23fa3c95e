package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/msgq/msgq/internal/store"
)

const apiKeyCols = "id, tenant, name, created_at, revoked_at, last_used_at"

func scanAPIKey(sc interface{ Scan(...any) error }) (*store.APIKey, error) {
	var k store.APIKey
	var created int64
	var revoked, used sql.NullInt64
	if err := sc.Scan(&k.ID, &k.Tenant, &k.Name, &created, &revoked, &used); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMicros(created)
	if revoked.Valid {
		t := fromMicros(revoked.Int64)
		k.RevokedAt = &t
	}
	if used.Valid {
		t := fromMicros(used.Int64)
		k.LastUsedAt = &t
	}
	return &k, nil
}

// APIKeyCreate records a new key. ON CONFLICT DO NOTHING covers the live
// name's unique index (and the hash's, which a 256-bit token never meets).
func (s *Store) APIKeyCreate(ctx context.Context, p store.APIKeyParams) (*store.APIKey, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := s.clock()
	id := s.ids.New(now)
	k, err := scanAPIKey(s.w.QueryRowContext(ctx, "INSERT INTO api_keys (id, tenant, name, hash, created_at) VALUES (?, ?, ?, ?, ?) "+
		"ON CONFLICT DO NOTHING RETURNING "+apiKeyCols, id, p.Tenant, p.Name, p.Hash, micros(now)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("api key %q exists (revoke it first): %w", p.Name, store.ErrConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: create api key: %w", err)
	}
	return k, nil
}

// APIKeyList lists every key, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]store.APIKey, error) {
	rs, err := s.r.QueryContext(ctx, "SELECT "+apiKeyCols+" FROM api_keys ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("sqlite: list api keys: %w", err)
	}
	defer rs.Close()
	var out []store.APIKey
	for rs.Next() {
		k, err := scanAPIKey(rs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list api keys: %w", err)
		}
		out = append(out, *k)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list api keys: %w", err)
	}
	return out, nil
}

// APIKeyRevoke revokes the key with id ref or, failing that, the live key
// named ref.
func (s *Store) APIKeyRevoke(ctx context.Context, ref string) (*store.APIKey, error) {
	now := s.clock()
	k, err := scanAPIKey(s.w.QueryRowContext(ctx, "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) "+
		"WHERE id = (SELECT id FROM api_keys WHERE id = ? UNION ALL SELECT id FROM api_keys WHERE name = ? AND revoked_at IS NULL LIMIT 1) "+
		"RETURNING "+apiKeyCols, micros(now), ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("no api key with id or name %q: %w", ref, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: revoke api key: %w", err)
	}
	return k, nil
}

// APIKeyLookup returns the live key with the hash.
func (s *Store) APIKeyLookup(ctx context.Context, hash string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.r.QueryRowContext(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE hash = ? AND revoked_at IS NULL", hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: look up api key: %w", err)
	}
	return k, nil
}

// APIKeyUsed records the key's use.
func (s *Store) APIKeyUsed(ctx context.Context, id string) error {
	if _, err := s.w.ExecContext(ctx, "UPDATE api_keys SET last_used_at = ? WHERE id = ?", micros(s.clock()), id); err != nil {
		return fmt.Errorf("sqlite: record api key use: %w", err)
	}
	return nil
}
