package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// countRefusedWrites adds an enqueue's replays and key conflicts (writes
// the unique index refused) to their running totals and to this minute's
// counts, in the enqueue's transaction, and drops minute counts older
// than store.CountBuckets.
func countRefusedWrites(ctx context.Context, tx *sql.Tx, now time.Time, replays, conflicts int) error {
	for _, c := range rules.RefusedCounts(now, replays, conflicts) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO counters (name, n) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET n = n + excluded.n",
			c.Name, c.N); err != nil {
			return fmt.Errorf("sqlite: enqueue: count %s: %w", c.Name, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO counts_by_minute (name, minute, n) VALUES (?, ?, ?) "+
			"ON CONFLICT (name, minute) DO UPDATE SET n = n + excluded.n", c.Name, c.Minute, c.N); err != nil {
			return fmt.Errorf("sqlite: enqueue: count %s: %w", c.Name, err)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM counts_by_minute WHERE name = ? AND minute < ?",
			c.Name, c.DropBefore); err != nil {
			return fmt.Errorf("sqlite: enqueue: count %s: %w", c.Name, err)
		}
	}
	return nil
}

// readCounters returns every running count by name (counters: a row per
// count, kept by the enqueue, the webhook ingest and 0024's triggers).
func readCounters(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[string]int64, error) {
	rs, err := q.QueryContext(ctx, "SELECT name, n FROM counters")
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
// transaction that the running counts (rules.SetCounters) do not give,
// each from an index: counts_by_minute, the in-flight index,
// history_failed, messages_resends_created and history_sent.
func vitalStats(ctx context.Context, tx *sql.Tx, p *store.StatsParams, st *store.Stats) error {
	wrap := func(err error) error { return fmt.Errorf("sqlite: stats: %w", err) }
	v, b := &st.VitalStats, rules.StatsBounds(st)
	if err := challengeVitals(ctx, tx, st.At, b.Since, &v.Challenges); err != nil {
		return err
	}
	for _, q := range []struct {
		sql  string
		args []any
		dst  any
	}{
		{"SELECT coalesce(sum(n), 0) FROM counts_by_minute WHERE name = ? AND minute >= ?",
			[]any{store.CounterKeyConflicts, b.SinceMinute}, &v.RecentKeyConflicts},
		{"SELECT coalesce(sum(n), 0) FROM counts_by_minute WHERE name = ? AND minute >= ?",
			[]any{store.CounterKeyReplays, b.SinceMinute}, &v.RecentKeyReplays},
		{"SELECT count(*) FROM messages INDEXED BY messages_in_flight WHERE " + inFlight + " AND state = 'sending' AND updated_at <= ?",
			[]any{micros(b.LongSending)}, &v.SendingLong},
		{"SELECT count(*) FROM messages INDEXED BY messages_resends_created WHERE resend_of <> '' AND created_at >= ?",
			[]any{micros(b.Since)}, &v.RecentResends},
	} {
		if err := tx.QueryRowContext(ctx, q.sql, q.args...).Scan(q.dst); err != nil {
			return wrap(err)
		}
	}
	if err := countInto(ctx, tx, v.RecentFailures, "SELECT reason, count(*) FROM history INDEXED BY history_failed "+
		"WHERE to_state = 'failed' AND applied = 1 AND at >= ? GROUP BY reason", micros(b.Since)); err != nil {
		return wrap(err)
	}
	if len(p.ProgressIdentities) == 0 {
		return nil
	}
	// Rows that became sent within the window, at least NoProgressAfter
	// ago, and whether they are still sent (no delivered, read or failed
	// status since).
	args := []any{micros(b.Since), micros(b.SentProgress)}
	for _, id := range p.ProgressIdentities {
		args = append(args, id)
	}
	rs, err := tx.QueryContext(ctx, "SELECT m.identity, count(*), coalesce(sum(m.state = 'sent'), 0) FROM messages m "+
		"WHERE m.id IN (SELECT h.message_id FROM history h INDEXED BY history_sent WHERE h.to_state = 'sent' AND h.applied = 1 AND h.at >= ? AND h.at <= ?) "+
		"AND m.identity IN ("+strings.TrimSuffix(strings.Repeat("?,", len(p.ProgressIdentities)), ",")+") GROUP BY m.identity", args...)
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
func countInto(ctx context.Context, tx *sql.Tx, m map[string]int, query string, args ...any) error {
	rs, err := tx.QueryContext(ctx, query, args...)
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
