package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/msgq/msgq/internal/store"
)

// setOptOutSQL applies a change only when it is at least as new as the one
// recorded: evidence that arrives out of order cannot undo a newer one. prev
// reads the row as it was before the statement (its snapshot), to say
// whether the standing changed.
const setOptOutSQL = `WITH prev AS (
    SELECT opted_out FROM opt_outs WHERE identity = $1 AND recipient = $2
), up AS (
    INSERT INTO opt_outs (identity, recipient, opted_out, source, changed_at, recorded_at)
    VALUES ($1, $2, $3, $4, coalesce($5, now()), now())
    ON CONFLICT (identity, recipient) DO UPDATE SET opted_out = excluded.opted_out, source = excluded.source,
        changed_at = excluded.changed_at, recorded_at = excluded.recorded_at
    WHERE excluded.changed_at >= opt_outs.changed_at
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM up), (SELECT opted_out FROM prev)`

// SetOptOut records an opt-out or an opt-in.
func (s *Store) SetOptOut(ctx context.Context, p store.OptOutParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	at := pgtype.Timestamptz{Time: p.At, Valid: !p.At.IsZero()} // NULL: the server's now()
	var written bool
	var prev pgtype.Bool
	if err := s.pool.QueryRow(ctx, setOptOutSQL, p.Identity, p.Recipient, p.OptedOut, p.Source, at).Scan(&written, &prev); err != nil {
		return false, fmt.Errorf("postgres: record opt-out: %w", err)
	}
	return store.OptOutChanged(written, prev.Valid, prev.Bool, p.OptedOut), nil
}

// OptedOut says whether recipient opted out of identity.
func (s *Store) OptedOut(ctx context.Context, identity, recipient string) (bool, error) {
	var out bool
	err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM opt_outs WHERE identity = $1 AND recipient = $2 AND opted_out)",
		identity, recipient).Scan(&out)
	if err != nil {
		return false, fmt.Errorf("postgres: opt-out of %s: %w", identity, err)
	}
	return out, nil
}

// ListOptOuts lists current opt-outs, newest first.
func (s *Store) ListOptOuts(ctx context.Context, identity string, limit int) ([]store.OptOut, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.pool.Query(ctx, "SELECT identity, recipient, opted_out, source, changed_at, recorded_at FROM opt_outs "+
		"WHERE opted_out AND ($1 = '' OR identity = $1) ORDER BY changed_at DESC, identity, recipient LIMIT $2", identity, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list opt-outs: %w", err)
	}
	defer rs.Close()
	var out []store.OptOut
	for rs.Next() {
		var o store.OptOut
		if err := rs.Scan(&o.Identity, &o.Recipient, &o.OptedOut, &o.Source, &o.ChangedAt, &o.RecordedAt); err != nil {
			return nil, fmt.Errorf("postgres: list opt-outs: %w", err)
		}
		o.ChangedAt, o.RecordedAt = o.ChangedAt.UTC(), o.RecordedAt.UTC()
		out = append(out, o)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list opt-outs: %w", err)
	}
	return out, nil
}
