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
		"coalesce((SELECT provider_code FROM attempts a WHERE a.message_id = messages.id ORDER BY seq DESC LIMIT 1), ''), "+
		stuckNoteSQL+" FROM messages INDEXED BY messages_in_flight WHERE "+strings.Join(where, " AND ")+" ORDER BY updated_at, id LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: stuck: %w", err)
	}
	defer rs.Close()
	out := []store.StuckMessage{}
	for rs.Next() {
		var code, note string
		m, err := scanMessage(extra{rs, []any{&code, &note}})
		if err != nil {
			return nil, fmt.Errorf("sqlite: stuck: %w", err)
		}
		out = append(out, store.StuckMessage{Message: *m, LastCode: code, Note: note})
	}
	return out, rs.Err()
}

// stuckNoteSQL is a stuck row's reconcile note (only unknown rows have
// one).
const stuckNoteSQL = "CASE WHEN state = 'unknown' THEN reconcile_note ELSE '' END"

// MessageNoteMany records notes in one transaction, one statement each:
// an update of reconcile_note alone (state_counts' trigger watches state,
// and updated_at, the row's age, is left as it is).
func (s *Store) MessageNoteMany(ctx context.Context, ps []store.NoteParams) error {
	if len(ps) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: note: %w", err)
	}
	defer tx.Rollback()
	ts := newTxStmts(tx)
	defer ts.close()
	for _, p := range ps {
		if _, err := ts.exec(ctx, "UPDATE messages SET reconcile_note = ? WHERE id = ? AND state = ?", p.Note, p.ID, string(p.State)); err != nil {
			return fmt.Errorf("sqlite: note: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: note: commit: %w", err)
	}
	return nil
}

// ownersChunk bounds the ids of one owners statement (SQLite's limit on
// parameters is far above it).
const ownersChunk = 500

// MessageProviderIDOwners reads the rows of identity recording any of ids
// from the partial index messages_identity_provider_id alone: INDEXED BY
// makes any drift between the query and the index an error instead of a
// walk of messages, and the index's predicate (a provider id not empty)
// is written out word for word, which SQLite needs to see to use it.
func (s *Store) MessageProviderIDOwners(ctx context.Context, identity string, ids []string) ([]store.ProviderIDOwner, error) {
	out := []store.ProviderIDOwner{}
	for start := 0; start < len(ids); start += ownersChunk {
		part := ids[start:min(start+ownersChunk, len(ids))]
		args := make([]any, 0, len(part)+1)
		args = append(args, identity)
		for _, id := range part {
			args = append(args, id)
		}
		rs, err := s.r.QueryContext(ctx, "SELECT provider_id, id, tenant, key, resend_of, state FROM messages INDEXED BY messages_identity_provider_id "+
			"WHERE identity = ? AND provider_id IN ("+strings.TrimSuffix(strings.Repeat("?,", len(part)), ",")+") AND provider_id <> ''", args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: provider id owners: %w", err)
		}
		for rs.Next() {
			var o store.ProviderIDOwner
			var st string
			if err := rs.Scan(&o.ProviderID, &o.ID, &o.Tenant, &o.Key, &o.ResendOf, &st); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: provider id owners: %w", err)
			}
			o.State = state.State(st)
			out = append(out, o)
		}
		err = rs.Err()
		rs.Close()
		if err != nil {
			return nil, fmt.Errorf("sqlite: provider id owners: %w", err)
		}
	}
	store.SortOwners(out)
	return out, nil
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
