package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// countRefusedWrites adds an enqueue's replays and key conflicts (writes
// the unique index refused) to their running totals and to this minute's
// counts, in the enqueue's transaction, and drops minute counts older
// than store.CountBuckets.
func countRefusedWrites(ctx context.Context, tx pgx.Tx, now time.Time, replays, conflicts int) error {
	for _, c := range rules.RefusedCounts(now, replays, conflicts) {
		if _, err := tx.Exec(ctx, "INSERT INTO counters (name, n) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET n = counters.n + excluded.n",
			c.Name, c.N); err != nil {
			return fmt.Errorf("postgres: enqueue: count %s: %w", c.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO counts_by_minute (name, minute, n) VALUES ($1, $2, $3) "+
			"ON CONFLICT (name, minute) DO UPDATE SET n = counts_by_minute.n + excluded.n", c.Name, c.Minute, c.N); err != nil {
			return fmt.Errorf("postgres: enqueue: count %s: %w", c.Name, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM counts_by_minute WHERE name = $1 AND minute < $2",
			c.Name, c.DropBefore); err != nil {
			return fmt.Errorf("postgres: enqueue: count %s: %w", c.Name, err)
		}
	}
	return nil
}

// countersSQL reads every running count: the rows of counters and the
// deltas not yet folded into them (0024's fold_counts; about a thousand
// at most), summed, so exact at the statement's snapshot.
const countersSQL = `SELECT name, sum(n)::bigint FROM (SELECT name, n FROM counters UNION ALL SELECT name, n FROM counter_deltas) c GROUP BY name`

// readCounters returns every running count by name.
func readCounters(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[string]int64, error) {
	rs, err := q.Query(ctx, countersSQL)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]int64{}
	for rs.Next() {
		var name string
		var n int64
		if err := rs.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] = n
	}
	return out, rs.Err()
}

// vitalStats reads the figures of store.VitalStats in Stats' read
// transaction that the running counts (rules.SetCounters) do not give:
// counts_by_minute, the in-flight rows, history_failed,
// messages_resends_created and history_sent.
func vitalStats(ctx context.Context, tx pgx.Tx, p *store.StatsParams, st *store.Stats) error {
	wrap := func(err error) error { return fmt.Errorf("postgres: stats: %w", err) }
	v, b := &st.VitalStats, rules.StatsBounds(st)
	if err := challengeVitals(ctx, tx, st.At, b.Since, &v.Challenges); err != nil {
		return err
	}
	for _, q := range []struct {
		sql  string
		args []any
		dst  any
	}{
		{"SELECT coalesce(sum(n), 0)::bigint FROM counts_by_minute WHERE name = $1 AND minute >= $2",
			[]any{store.CounterKeyConflicts, b.SinceMinute}, &v.RecentKeyConflicts},
		{"SELECT coalesce(sum(n), 0)::bigint FROM counts_by_minute WHERE name = $1 AND minute >= $2",
			[]any{store.CounterKeyReplays, b.SinceMinute}, &v.RecentKeyReplays},
		{"SELECT count(*) FROM messages WHERE state IN ('sending', 'unknown') AND state = 'sending' AND updated_at <= $1",
			[]any{b.LongSending}, &v.SendingLong},
		{"SELECT count(*) FROM messages WHERE resend_of <> '' AND created_at >= $1", []any{b.Since}, &v.RecentResends},
	} {
		if err := tx.QueryRow(ctx, q.sql, q.args...).Scan(q.dst); err != nil {
			return wrap(err)
		}
	}
	if err := countInto(ctx, tx, v.RecentFailures, "SELECT reason, count(*) FROM history "+
		"WHERE to_state = 'failed' AND applied AND at >= $1 GROUP BY reason", b.Since); err != nil {
		return wrap(err)
	}
	if len(p.ProgressIdentities) == 0 {
		return nil
	}
	// Rows that became sent within the window, at least NoProgressAfter
	// ago, and whether they are still sent (no delivered, read or failed
	// status since).
	rs, err := tx.Query(ctx, "SELECT m.identity, count(*), count(*) FILTER (WHERE m.state = 'sent') FROM messages m "+
		"WHERE m.id = ANY(ARRAY(SELECT h.message_id FROM history h WHERE h.to_state = 'sent' AND h.applied AND h.at >= $1 AND h.at <= $2)) "+
		"AND m.identity = ANY($3) GROUP BY m.identity", b.Since, b.SentProgress, p.ProgressIdentities)
	if err != nil {
		return wrap(err)
	}
	defer rs.Close()
	got := map[string]store.SentProgress{}
	for rs.Next() {
		var sp store.SentProgress
		if err := rs.Scan(&sp.Identity, &sp.Sent, &sp.WithoutProgress); err != nil {
			return wrap(err)
		}
		got[sp.Identity] = sp
	}
	if err := rs.Err(); err != nil {
		return wrap(err)
	}
	rules.SetSentProgress(st, p.ProgressIdentities, got)
	return nil
}

// countInto adds the (name, count) rows of query to m.
func countInto(ctx context.Context, tx pgx.Tx, m map[string]int, query string, args ...any) error {
	rs, err := tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var k string
		var n int
		if err := rs.Scan(&k, &n); err != nil {
			return err
		}
		m[k] += n
	}
	return rs.Err()
}
