package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// loadDaily reads, inside the claim's write-locked transaction, the count
// of each limited identity among cands and which candidate recipients it
// messaged within the window. SQLite has one writer, so the count cannot
// change under the claim.
func loadDaily(ctx context.Context, tx *sql.Tx, cands []*store.Message, limits map[string]int, now time.Time) (*store.DailyLimiter, error) {
	d := store.NewDailyLimiter(limits)
	ids, pairs := d.Need(cands)
	since := micros(now.Add(-store.DailyWindow))
	for _, id := range ids {
		// The count is kept, not counted (daily_counts, kept by triggers
		// on daily_recipients; migration 0023): the recipients that left
		// the window are dropped first, so the rows left are the count.
		// A count(*) over the window read up to a whole day's recipients
		// on every claim.
		if _, err := tx.ExecContext(ctx, "DELETE FROM daily_recipients WHERE identity = ? AND last_at <= ?", id, since); err != nil {
			return nil, fmt.Errorf("sqlite: claim daily recipients: %w", err)
		}
		var n int
		var oldest sql.NullInt64
		if err := tx.QueryRowContext(ctx, "SELECT coalesce((SELECT recipients FROM daily_counts WHERE identity = ?1), 0), "+
			"(SELECT min(last_at) FROM daily_recipients WHERE identity = ?1)", id).Scan(&n, &oldest); err != nil {
			return nil, fmt.Errorf("sqlite: claim daily recipients: %w", err)
		}
		var o time.Time
		if oldest.Valid {
			o = fromMicros(oldest.Int64)
		}
		d.Load(id, n, o)
	}
	const chunk = 400
	for start := 0; start < len(pairs); start += chunk {
		part := pairs[start:min(start+chunk, len(pairs))]
		args := make([]any, 0, 2*len(part)+1)
		for _, k := range part {
			args = append(args, k.Identity, k.Recipient)
		}
		args = append(args, since)
		rs, err := tx.QueryContext(ctx, "SELECT identity, recipient FROM daily_recipients WHERE (identity, recipient) IN (VALUES "+
			placeholders(len(part), 2)+") AND last_at > ?", args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: claim daily recipients: %w", err)
		}
		for rs.Next() {
			var k store.Pair
			if err := rs.Scan(&k.Identity, &k.Recipient); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: claim daily recipients: %w", err)
			}
			d.LoadRecent(k)
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: claim daily recipients: %w", err)
		}
	}
	return d, nil
}

// saveDaily records the recipients the claim messaged and moves the rows
// the limit held to when a place may free.
func saveDaily(ctx context.Context, tx *sql.Tx, d *store.DailyLimiter, now time.Time) error {
	for _, k := range d.Taken() {
		if _, err := tx.ExecContext(ctx, "INSERT INTO daily_recipients (identity, recipient, last_at) VALUES (?, ?, ?) "+
			"ON CONFLICT (identity, recipient) DO UPDATE SET last_at = excluded.last_at", k.Identity, k.Recipient, micros(now)); err != nil {
			return fmt.Errorf("sqlite: claim daily recipients: %w", err)
		}
	}
	// Every due row of a held identity to a recipient outside the count
	// waits, not only the candidates seen: otherwise the next claims
	// would read the same held rows again while rows to recipients
	// already messaged wait behind them.
	for _, h := range d.Holds(now) {
		if _, err := tx.ExecContext(ctx, "UPDATE messages SET next_attempt_at = ?, last_error = ? WHERE state = 'queued' AND identity = ? "+
			"AND next_attempt_at <= ? AND NOT EXISTS (SELECT 1 FROM daily_recipients dr WHERE dr.identity = messages.identity "+
			"AND dr.recipient = messages.recipient AND dr.last_at > ?)",
			micros(h.Until), h.Error, h.Identity, micros(now), micros(now.Add(-store.DailyWindow))); err != nil {
			return fmt.Errorf("sqlite: claim daily hold: %w", err)
		}
	}
	return nil
}

// DailyRecipientsUsed counts each identity's recipients within the window.
func (s *Store) DailyRecipientsUsed(ctx context.Context, identities []string) (map[string]int, error) {
	out := map[string]int{}
	since := micros(s.now().Add(-store.DailyWindow))
	for _, id := range identities {
		// The kept count, less the recipients that left the window since
		// the identity's last claim dropped them.
		var n int
		if err := s.r.QueryRowContext(ctx, "SELECT coalesce((SELECT recipients FROM daily_counts WHERE identity = ?1), 0) - "+
			"(SELECT count(*) FROM daily_recipients WHERE identity = ?1 AND last_at <= ?2)", id, since).Scan(&n); err != nil {
			return nil, fmt.Errorf("sqlite: daily recipients: %w", err)
		}
		out[id] = n
	}
	return out, nil
}
