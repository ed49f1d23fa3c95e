package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/msgq/msgq/internal/store"
)

// setOptOutSQL applies a change only when it is at least as new as the one
// recorded: evidence that arrives out of order cannot undo a newer one.
const setOptOutSQL = `INSERT INTO opt_outs (identity, recipient, opted_out, source, changed_at, recorded_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (identity, recipient) DO UPDATE SET opted_out = excluded.opted_out, source = excluded.source,
    changed_at = excluded.changed_at, recorded_at = excluded.recorded_at
WHERE excluded.changed_at >= opt_outs.changed_at`

// SetOptOut records an opt-out or an opt-in.
func (s *Store) SetOptOut(ctx context.Context, p store.OptOutParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	now := s.clock()
	at := p.At
	if at.IsZero() {
		at = now
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("sqlite: record opt-out: %w", err)
	}
	defer tx.Rollback()
	var prev sql.NullBool
	err = tx.QueryRowContext(ctx, "SELECT opted_out FROM opt_outs WHERE identity = ? AND recipient = ?", p.Identity, p.Recipient).Scan(&prev)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("sqlite: record opt-out: %w", err)
	}
	res, err := tx.ExecContext(ctx, setOptOutSQL, p.Identity, p.Recipient, p.OptedOut, p.Source, micros(at), micros(now))
	if err != nil {
		return false, fmt.Errorf("sqlite: record opt-out: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("sqlite: record opt-out: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("sqlite: record opt-out: %w", err)
	}
	return store.OptOutChanged(n > 0, prev.Valid, prev.Bool, p.OptedOut), nil
}

// OptedOut says whether recipient opted out of identity.
func (s *Store) OptedOut(ctx context.Context, identity, recipient string) (bool, error) {
	var out bool
	err := s.r.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM opt_outs WHERE identity = ? AND recipient = ? AND opted_out = 1)",
		identity, recipient).Scan(&out)
	if err != nil {
		return false, fmt.Errorf("sqlite: opt-out of %s: %w", identity, err)
	}
	return out, nil
}

// ListOptOuts lists current opt-outs, newest first.
func (s *Store) ListOptOuts(ctx context.Context, identity string, limit int) ([]store.OptOut, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.r.QueryContext(ctx, "SELECT identity, recipient, opted_out, source, changed_at, recorded_at FROM opt_outs "+
		"WHERE opted_out = 1 AND (? = '' OR identity = ?) ORDER BY changed_at DESC, identity, recipient LIMIT ?", identity, identity, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list opt-outs: %w", err)
	}
	defer rs.Close()
	var out []store.OptOut
	for rs.Next() {
		var o store.OptOut
		var changed, recorded int64
		if err := rs.Scan(&o.Identity, &o.Recipient, &o.OptedOut, &o.Source, &changed, &recorded); err != nil {
			return nil, fmt.Errorf("sqlite: list opt-outs: %w", err)
		}
		o.ChangedAt, o.RecordedAt = fromMicros(changed), fromMicros(recorded)
		out = append(out, o)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list opt-outs: %w", err)
	}
	return out, nil
}
