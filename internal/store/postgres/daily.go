package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
)

// limited says a claim keeps a daily unique-recipient limit.
func limited(limits map[string]int) bool {
	for _, n := range limits {
		if n > 0 {
			return true
		}
	}
	return false
}

// lockDaily takes, for each limited identity among cands, a transaction
// advisory lock (in name order, so claims never wait on each other in a
// cycle): claims of one limited identity read and record its count one
// after the other, so two drains cannot both take its last place. The
// candidates themselves were locked SKIP LOCKED, without waiting.
func lockDaily(ctx context.Context, tx pgx.Tx, cands []*store.Message, limits map[string]int) (*store.DailyLimiter, error) {
	d := store.NewDailyLimiter(limits)
	ids, _ := d.Need(cands)
	for _, id := range ids {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('msgq.daily_recipients:' || $1, 0))", id); err != nil {
			return nil, fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
	}
	return d, nil
}

// loadDaily reads, under lockDaily's locks, each limited identity's count
// and which candidate recipients it messaged within the window. Read
// committed: each statement sees what the claims before it committed.
func loadDaily(ctx context.Context, tx pgx.Tx, d *store.DailyLimiter, cands []*store.Message, now time.Time) error {
	ids, pairs := d.Need(cands)
	since := now.Add(-store.DailyWindow)
	for _, id := range ids {
		var n int
		var oldest *time.Time
		if err := tx.QueryRow(ctx, "SELECT count(*), min(last_at) FROM daily_recipients WHERE identity = $1 AND last_at > $2",
			id, since).Scan(&n, &oldest); err != nil {
			return fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
		var o time.Time
		if oldest != nil {
			o = oldest.UTC()
		}
		d.Load(id, n, o)
	}
	if len(pairs) == 0 {
		return nil
	}
	idents, rcpts := make([]string, len(pairs)), make([]string, len(pairs))
	for i, k := range pairs {
		idents[i], rcpts[i] = k.Identity, k.Recipient
	}
	rs, err := tx.Query(ctx, "SELECT identity, recipient FROM daily_recipients WHERE (identity, recipient) IN "+
		"(SELECT i, r FROM unnest($1::text[], $2::text[]) AS u(i, r)) AND last_at > $3", idents, rcpts, since)
	if err != nil {
		return fmt.Errorf("postgres: claim daily recipients: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var k store.Pair
		if err := rs.Scan(&k.Identity, &k.Recipient); err != nil {
			return fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
		d.LoadRecent(k)
	}
	return rs.Err()
}

// saveDaily records the recipients the claim messaged, moves the due rows
// of a held identity to recipients outside its count to when a place may
// free (rows another claim holds are left to it: SKIP LOCKED, so that no
// claim waits on another's rows while holding its identity's lock), and
// drops recipients that left the window.
func saveDaily(ctx context.Context, tx pgx.Tx, d *store.DailyLimiter, now time.Time) error {
	var idents, rcpts []string
	for _, k := range d.Taken() {
		idents, rcpts = append(idents, k.Identity), append(rcpts, k.Recipient)
	}
	if len(idents) > 0 {
		if _, err := tx.Exec(ctx, "INSERT INTO daily_recipients (identity, recipient, last_at) "+
			"SELECT i, r, $3 FROM unnest($1::text[], $2::text[]) AS u(i, r) "+
			"ON CONFLICT (identity, recipient) DO UPDATE SET last_at = excluded.last_at", idents, rcpts, now); err != nil {
			return fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
	}
	since := now.Add(-store.DailyWindow)
	for _, h := range d.Holds(now) {
		if _, err := tx.Exec(ctx, `UPDATE messages m SET next_attempt_at = $1, last_error = $2 FROM (
	SELECT id FROM messages WHERE state = 'queued' AND identity = $3 AND next_attempt_at <= $4
		AND NOT EXISTS (SELECT 1 FROM daily_recipients dr WHERE dr.identity = messages.identity AND dr.recipient = messages.recipient AND dr.last_at > $5)
	FOR UPDATE SKIP LOCKED
) h WHERE m.id = h.id`, h.Until, h.Error, h.Identity, now, since); err != nil {
			return fmt.Errorf("postgres: claim daily hold: %w", err)
		}
	}
	for _, id := range d.Identities() {
		if _, err := tx.Exec(ctx, "DELETE FROM daily_recipients WHERE identity = $1 AND last_at <= $2", id, since); err != nil {
			return fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
	}
	return nil
}

// DailyRecipientsUsed counts each identity's recipients within the window
// of the server's clock.
func (s *Store) DailyRecipientsUsed(ctx context.Context, identities []string) (map[string]int, error) {
	out := map[string]int{}
	for _, id := range identities {
		out[id] = 0
	}
	if len(identities) == 0 {
		return out, nil
	}
	now, err := s.clock(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, "SELECT identity, count(*) FROM daily_recipients WHERE identity = ANY($1::text[]) AND last_at > $2 GROUP BY identity",
		identities, now.Add(-store.DailyWindow))
	if err != nil {
		return nil, fmt.Errorf("postgres: daily recipients: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var id string
		var n int
		if err := rs.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("postgres: daily recipients: %w", err)
		}
		out[id] = n
	}
	return out, rs.Err()
}
