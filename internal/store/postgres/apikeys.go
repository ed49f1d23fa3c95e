package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/msgq/msgq/internal/store"
)

const apiKeyCols = "id, tenant, name, created_at, revoked_at, last_used_at"

func scanAPIKey(sc pgx.Row) (*store.APIKey, error) {
	var k store.APIKey
	var revoked, used pgtype.Timestamptz
	if err := sc.Scan(&k.ID, &k.Tenant, &k.Name, &k.CreatedAt, &revoked, &used); err != nil {
		return nil, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	if revoked.Valid {
		t := revoked.Time.UTC()
		k.RevokedAt = &t
	}
	if used.Valid {
		t := used.Time.UTC()
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
	// The id is made on the host's clock (it only orders the list);
	// created_at is the server's unless the store has a clock of its own.
	now, at := time.Now(), pgtype.Timestamptz{}
	if s.now != nil {
		now = s.now()
		at = pgtype.Timestamptz{Time: now, Valid: true}
	}
	id := s.ids.New(now)
	k, err := scanAPIKey(s.pool.QueryRow(ctx, "INSERT INTO api_keys (id, tenant, name, hash, created_at) VALUES ($1, $2, $3, $4, coalesce($5, now())) "+
		"ON CONFLICT DO NOTHING RETURNING "+apiKeyCols, id, p.Tenant, p.Name, p.Hash, at))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("api key %q exists (revoke it first): %w", p.Name, store.ErrConflict)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: create api key: %w", err)
	}
	return k, nil
}

// APIKeyList lists every key, oldest first.
func (s *Store) APIKeyList(ctx context.Context) ([]store.APIKey, error) {
	rs, err := s.pool.Query(ctx, "SELECT "+apiKeyCols+" FROM api_keys ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("postgres: list api keys: %w", err)
	}
	defer rs.Close()
	var out []store.APIKey
	for rs.Next() {
		k, err := scanAPIKey(rs)
		if err != nil {
			return nil, fmt.Errorf("postgres: list api keys: %w", err)
		}
		out = append(out, *k)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list api keys: %w", err)
	}
	return out, nil
}

// APIKeyRevoke revokes the key with id ref or, failing that, the live key
// named ref.
func (s *Store) APIKeyRevoke(ctx context.Context, ref string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) "+
		"WHERE id = (SELECT id FROM api_keys WHERE id = $1 UNION ALL SELECT id FROM api_keys WHERE name = $1 AND revoked_at IS NULL LIMIT 1) "+
		"RETURNING "+apiKeyCols, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("no api key with id or name %q: %w", ref, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: revoke api key: %w", err)
	}
	return k, nil
}

// APIKeyLookup returns the live key with the hash.
func (s *Store) APIKeyLookup(ctx context.Context, hash string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE hash = $1 AND revoked_at IS NULL", hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: look up api key: %w", err)
	}
	return k, nil
}

// APIKeyUsed records the key's use.
func (s *Store) APIKeyUsed(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, "UPDATE api_keys SET last_used_at = now() WHERE id = $1", id); err != nil {
		return fmt.Errorf("postgres: record api key use: %w", err)
	}
	return nil
}
