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
//
// The count is kept, not counted: daily_counts holds each identity's rows
// of daily_recipients, and a claim first drops (and uncounts) the rows
// that left the window, so the rows left are the count. A count(*) over
// the window read up to a whole day's recipients (WhatsApp's tiers go to
// 100,000) on every claim.
func loadDaily(ctx context.Context, tx pgx.Tx, d *store.DailyLimiter, cands []*store.Message, now time.Time) error {
	ids, pairs := d.Need(cands)
	since := now.Add(-store.DailyWindow)
	for _, id := range ids {
		var n int64
		var oldest *time.Time
		if err := tx.QueryRow(ctx, dailyLoadSQL, id, since).Scan(&n, &oldest); err != nil {
			return fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
		var o time.Time
		if oldest != nil {
			o = oldest.UTC()
		}
		d.Load(id, int(n), o)
	}
	if len(pairs) == 0 {
		return nil
	}
	idents, rcpts := make([]string, len(pairs)), make([]string, len(pairs))
	for i, k := range pairs {
		idents[i], rcpts[i] = k.Identity, k.Recipient
	}
	// One primary-key look-up per pair, whatever the table's size (as
	// loadPace's).
	rs, err := tx.Query(ctx, "SELECT dr.identity, dr.recipient FROM unnest($1::text[], $2::text[]) AS u(i, r) "+
		"CROSS JOIN LATERAL (SELECT identity, recipient FROM daily_recipients WHERE identity = u.i AND recipient = u.r AND last_at > $3 OFFSET 0) dr",
		idents, rcpts, since)
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

// dailyLoadSQL drops an identity's recipients that left the window ($2),
// takes them off its count, and returns the count and the oldest
// recipient left. (The final SELECT sees the table as before the DELETE,
// hence its own "last_at > $2".)
const dailyLoadSQL = `WITH d AS (
	DELETE FROM daily_recipients WHERE identity = $1 AND last_at <= $2 RETURNING 1
), u AS (
	UPDATE daily_counts SET recipients = recipients - (SELECT count(*) FROM d) WHERE identity = $1 RETURNING recipients
)
SELECT coalesce((SELECT recipients FROM u), 0),
	(SELECT min(last_at) FROM daily_recipients WHERE identity = $1 AND last_at > $2)`

// saveDaily records the recipients the claim messaged (counting the new
// ones) and moves the due rows of a held identity to recipients outside
// its count to when a place may free (rows another claim holds are left to
// it: SKIP LOCKED, so that no claim waits on another's rows while holding
// its identity's lock).
func saveDaily(ctx context.Context, tx pgx.Tx, d *store.DailyLimiter, now time.Time) error {
	var idents, rcpts []string
	for _, k := range d.Taken() {
		idents, rcpts = append(idents, k.Identity), append(rcpts, k.Recipient)
	}
	if len(idents) > 0 {
		// xmax = 0 tells a row the INSERT made from one its ON CONFLICT
		// updated: only the first is a new recipient to count.
		if _, err := tx.Exec(ctx, `WITH ins AS (
	INSERT INTO daily_recipients (identity, recipient, last_at)
	SELECT i, r, $3 FROM unnest($1::text[], $2::text[]) AS u(i, r)
	ON CONFLICT (identity, recipient) DO UPDATE SET last_at = excluded.last_at
	RETURNING identity, xmax = 0 AS fresh
)
INSERT INTO daily_counts (identity, recipients)
SELECT identity, count(*) FILTER (WHERE fresh) FROM ins GROUP BY identity ORDER BY identity
ON CONFLICT (identity) DO UPDATE SET recipients = daily_counts.recipients + excluded.recipients`, idents, rcpts, now); err != nil {
			return fmt.Errorf("postgres: claim daily recipients: %w", err)
		}
	}
	since := now.Add(-store.DailyWindow)
	for _, h := range d.Holds(now) {
		// By the locked rows' ids (an array: the primary key), never a
		// join the planner could make a scan of all of messages.
		if _, err := tx.Exec(ctx, `UPDATE messages SET next_attempt_at = $1, last_error = $2 WHERE id = ANY(ARRAY(
	SELECT id FROM messages WHERE state = 'queued' AND identity = $3 AND next_attempt_at <= $4
		AND NOT EXISTS (SELECT 1 FROM daily_recipients dr WHERE dr.identity = messages.identity AND dr.recipient = messages.recipient AND dr.last_at > $5)
	FOR UPDATE SKIP LOCKED))`, h.Until, h.Error, h.Identity, now, since); err != nil {
			return fmt.Errorf("postgres: claim daily hold: %w", err)
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
	// The kept count, less the recipients that left the window since the
	// identity's last claim dropped them (daily_counts, loadDaily).
	rs, err := s.pool.Query(ctx, "SELECT c.identity, c.recipients - (SELECT count(*) FROM daily_recipients d "+
		"WHERE d.identity = c.identity AND d.last_at <= $2) FROM daily_counts c WHERE c.identity = ANY($1::text[])",
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
