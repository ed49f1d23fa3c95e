package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// inFlight is the predicate of the messages_in_flight index, repeated
// word for word: SQLite uses a partial index only for a query whose WHERE
// plainly implies its predicate.
const inFlight = "state IN ('sending', 'unknown')"

// MessageStuck lists sending rows with an expired lease or an old claim
// and old unknown rows, oldest first, from the messages_in_flight index.
func (s *Store) MessageStuck(ctx context.Context, p *store.StuckParams) ([]store.StuckMessage, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := p.Now
	if now.IsZero() {
		now = s.clock()
	}
	cutoff := micros(now.Add(-p.OlderThan))
	// A lease is over (store.LeaseOver) a margin after its lease_until.
	over := micros(now.Add(-store.TakeoverMargin))
	where := []string{inFlight}
	var args []any
	if p.LeaseExpired {
		where, args = append(where, "state = 'sending' AND lease_until <= ?"), append(args, over)
	} else {
		where = append(where, "(updated_at <= ? OR (state = 'sending' AND lease_until <= ?))")
		args = append(args, cutoff, over)
	}
	if p.State != state.None {
		where, args = append(where, "state = ?"), append(args, string(p.State))
	}
	if !p.PastDeadline {
		where = append(where, "NOT (state = 'unknown' AND expires_at IS NOT NULL AND expires_at <= ? "+
			"AND EXISTS (SELECT 1 FROM challenge_steps cs WHERE cs.message_id = messages.id))")
		args = append(args, micros(now))
	}
	for col, v := range map[string]string{"tenant": p.Tenant, "identity": p.Identity, "purpose": p.Purpose} {
		if v != "" {
			where, args = append(where, col+" = ?"), append(args, v)
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	args = append(args, limit)
	rs, err := s.r.QueryContext(ctx, "SELECT "+messageCols+", "+
		"coalesce((SELECT provider_code FROM attempts a WHERE a.message_id = messages.id ORDER BY seq DESC LIMIT 1), '') "+
		"FROM messages INDEXED BY messages_in_flight WHERE "+strings.Join(where, " AND ")+" ORDER BY updated_at, id LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stuck: %w", err)
	}
	defer rs.Close()
	out := []store.StuckMessage{}
	for rs.Next() {
		var code string
		m, err := scanMessage(extra{rs, []any{&code}})
		if err != nil {
			return nil, fmt.Errorf("sqlite: stuck: %w", err)
		}
		out = append(out, store.StuckMessage{Message: *m, LastCode: code})
	}
	return out, rs.Err()
}

// extra scans a message's columns and then trailing ones.
type extra struct {
	scanner
	more []any
}

func (e extra) Scan(dest ...any) error { return e.scanner.Scan(append(dest, e.more...)...) }

// Stats reads the vital signs, each from an index or a counter: the
// counts from state_counts and the running counts from counters (kept by
// triggers: rules.SetCounters), the oldest eligible row
// from messages_due, the in-flight figures from messages_in_flight, the
// recent ones from attempts_finished and history_delivered, the evidence
// figures from the partial indexes of what waits (webhookStats).
func (s *Store) Stats(ctx context.Context, p *store.StatsParams) (*store.Stats, error) {
	now := p.Now
	if now.IsZero() {
		now = s.clock()
	}
	st := rules.NewStats(p, now, rules.StatsWindow(p))
	b := rules.StatsBounds(st)
	since := micros(b.Since)
	// One read transaction: the figures are of one moment.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	defer tx.Rollback()

	counters, err := readCounters(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	rules.SetCounters(st, counters)
	rs, err := tx.QueryContext(ctx, "SELECT identity, state, n FROM state_counts WHERE n > 0 ORDER BY identity, state")
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	for rs.Next() {
		var c store.StateCount
		var stt string
		if err := rs.Scan(&c.Identity, &stt, &c.N); err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
		c.State = state.State(stt)
		rules.AddCount(st, c)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}

	// Per lane, so that each is one ordered walk of messages_due.
	for _, lane := range []string{store.LaneReply, store.LaneBulk} {
		var due sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT next_attempt_at FROM messages INDEXED BY messages_due "+
			"WHERE state = 'queued' AND lane = ? AND next_attempt_at <= ? AND (expires_at IS NULL OR expires_at > ?) "+
			"AND identity NOT IN (SELECT name FROM identities WHERE paused) ORDER BY lane DESC, next_attempt_at LIMIT 1",
			lane, micros(now), micros(now)).Scan(&due)
		if err != nil && err != sql.ErrNoRows {
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
		if due.Valid {
			rules.AddDue(st, fromMicros(due.Int64))
		}
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM messages INDEXED BY messages_in_flight WHERE "+inFlight+
		" AND state = 'sending' AND lease_until <= ?", micros(b.LeaseOver)).Scan(&st.SendingPastLease); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	if err := webhookStats(ctx, tx, &st.WebhookStats); err != nil {
		return nil, err
	}
	if err := vitalStats(ctx, tx, p, st); err != nil {
		return nil, err
	}
	rs, err = tx.QueryContext(ctx, "SELECT class, count(*) FROM attempts WHERE finished_at >= ? GROUP BY class", since)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	for rs.Next() {
		var class string
		var n int
		if err := rs.Scan(&class, &n); err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
		st.AttemptsByClass[class] = n
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}

	// Sent-to-delivered: the latest deliveries in the window (a bounded
	// sample), each against the time its row became sent.
	rs, err = tx.QueryContext(ctx, "SELECT h.at - (SELECT max(s.at) FROM history s WHERE s.message_id = h.message_id AND s.to_state = 'sent' AND s.applied = 1) "+
		"FROM history h INDEXED BY history_delivered WHERE h.to_state = 'delivered' AND h.applied = 1 AND h.at >= ? ORDER BY h.at DESC LIMIT ?",
		since, store.LatencySample)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	var lat []time.Duration
	for rs.Next() {
		st.Delivered++
		var d sql.NullInt64
		if err := rs.Scan(&d); err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: stats: %w", err)
		}
		if d.Valid { // delivered without having been sent first: no latency
			lat = append(lat, time.Duration(d.Int64)*time.Microsecond)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: stats: %w", err)
	}
	rules.SetLatencies(st, lat)
	return st, nil
}

// purgeBatch bounds one purge transaction, so that drains and senders
// are never held behind a long one.
const purgeBatch = 1000

// MessagePurge drops payloads of finished rows created before p.Before,
// walking the primary key (ids order rows by creation) in batches.
func (s *Store) MessagePurge(ctx context.Context, p *store.PurgeParams) (int, error) {
	where := "id < ? AND state IN ('sent', 'delivered', 'read', 'failed') AND payload IS NOT NULL"
	args := []any{store.IDBefore(p.Before)}
	if p.Purpose != "" {
		where, args = where+" AND purpose = ?", append(args, p.Purpose)
	}
	if p.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, p.Tenant)
	}
	if p.DryRun {
		var n int
		if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM messages WHERE "+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("sqlite: purge: %w", err)
		}
		return n, nil
	}
	total := 0
	for {
		n, err := s.purgeOnce(ctx, where, args)
		total += n
		if err != nil || n < purgeBatch {
			return total, err
		}
	}
}

func (s *Store) purgeOnce(ctx context.Context, where string, args []any) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	defer tx.Rollback()
	rs, err := tx.QueryContext(ctx, "UPDATE messages SET payload = NULL, last_error = '' WHERE id IN "+
		"(SELECT id FROM messages WHERE "+where+" LIMIT ?) RETURNING id", append(args, purgeBatch)...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	var ids []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return 0, fmt.Errorf("sqlite: purge: %w", err)
		}
		ids = append(ids, id)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("sqlite: purge: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	in := strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")
	idArgs := make([]any, len(ids))
	for i, id := range ids {
		idArgs[i] = id
	}
	if _, err := tx.ExecContext(ctx, "UPDATE attempts SET raw_error = '' WHERE message_id IN ("+in+") AND raw_error <> ''", idArgs...); err != nil {
		return 0, fmt.Errorf("sqlite: purge attempts: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sqlite: purge: commit: %w", err)
	}
	return len(ids), nil
}
