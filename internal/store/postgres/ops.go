package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// MessageStuck lists sending rows with an expired lease or an old claim
// and old unknown rows, oldest first, from the messages_in_flight index.
func (s *Store) MessageStuck(ctx context.Context, p *store.StuckParams) ([]store.StuckMessage, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now, err := s.at(ctx, s.pool, p.Now)
	if err != nil {
		return nil, err
	}
	// $1: a lease is over (store.LeaseOver) a margin after its lease_until.
	args := []any{now.Add(-store.TakeoverMargin)}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"state IN ('sending', 'unknown')"}
	if p.LeaseExpired {
		where = append(where, "state = 'sending' AND lease_until <= $1")
	} else {
		where = append(where, "(updated_at <= "+arg(now.Add(-p.OlderThan))+" OR (state = 'sending' AND lease_until <= $1))")
	}
	if p.State != state.None {
		where = append(where, "state = "+arg(string(p.State)))
	}
	for _, f := range []struct{ col, v string }{{"tenant", p.Tenant}, {"identity", p.Identity}, {"purpose", p.Purpose}} {
		if f.v != "" {
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + messageCols + ", coalesce((SELECT provider_code FROM attempts a WHERE a.message_id = messages.id ORDER BY seq DESC LIMIT 1), ''), " +
		stuckNoteSQL + " FROM messages WHERE " + strings.Join(where, " AND ") + " ORDER BY updated_at, id LIMIT " + arg(limit)
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: stuck: %w", err)
	}
	defer rs.Close()
	out := []store.StuckMessage{}
	for rs.Next() {
		var code, note string
		m, err := scanMessage(withExtra(rs, &code, &note))
		if err != nil {
			return nil, fmt.Errorf("postgres: stuck: %w", err)
		}
		out = append(out, store.StuckMessage{Message: *m, LastCode: code, Note: note})
	}
	return out, rs.Err()
}

// stuckNoteSQL is a stuck row's reconcile note (only unknown rows have
// one).
const stuckNoteSQL = "CASE WHEN state = 'unknown' THEN reconcile_note ELSE '' END"

// MessageNoteMany records notes in one transaction: the rows are locked
// first, in id order as every multi-row writer locks them (no deadlock
// with a claim or a batch of transitions), then updated in one statement
// over column arrays. Only reconcile_note changes: a transition waiting
// on the lock then goes on as it would have.
func (s *Store) MessageNoteMany(ctx context.Context, ps []store.NoteParams) error {
	if len(ps) == 0 {
		return nil
	}
	// Of two items for one row, the later wins (an UPDATE ... FROM would
	// take either).
	last := make(map[string]int, len(ps))
	for i, p := range ps {
		last[p.ID] = i
	}
	var ids, states, notes []string
	for i, p := range ps {
		if last[p.ID] == i {
			ids, states, notes = append(ids, p.ID), append(states, string(p.State)), append(notes, p.Note)
		}
	}
	return s.inTx(ctx, "note", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT id FROM messages WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids); err != nil {
			return fmt.Errorf("postgres: note: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE messages m SET reconcile_note = x.note
			FROM unnest($1::text[], $2::text[], $3::text[]) AS x(id, state, note)
			WHERE m.id = x.id AND m.state = x.state`, ids, states, notes); err != nil {
			return fmt.Errorf("postgres: note: %w", err)
		}
		return nil
	})
}

// MessageProviderIDOwners reads the rows of identity recording any of ids
// in one statement, from the partial index messages_identity_provider_id
// (its predicate, a provider id not empty, is written out for the
// planner).
func (s *Store) MessageProviderIDOwners(ctx context.Context, identity string, ids []string) ([]store.ProviderIDOwner, error) {
	out := []store.ProviderIDOwner{}
	if len(ids) == 0 {
		return out, nil
	}
	rs, err := s.pool.Query(ctx, ownersSQL, identity, ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: provider id owners: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var o store.ProviderIDOwner
		var st string
		if err := rs.Scan(&o.ProviderID, &o.ID, &o.Tenant, &o.Key, &o.ResendOf, &st); err != nil {
			return nil, fmt.Errorf("postgres: provider id owners: %w", err)
		}
		o.State = state.State(st)
		out = append(out, o)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: provider id owners: %w", err)
	}
	store.SortOwners(out)
	return out, nil
}

// ownersSQL is MessageProviderIDOwners' statement.
const ownersSQL = `SELECT provider_id, id, tenant, key, resend_of, state FROM messages
WHERE identity = $1 AND provider_id = ANY($2::text[]) AND provider_id <> ''`

// Stats reads the vital signs in one repeatable-read transaction (one
// moment's figures), each from a running count or an index of what it
// counts, never from every row a queue has kept: the counts by state
// from state_counts and the running counts from counters (0024: kept by
// triggers as deltas folded now and then, so that no drain waits for
// another's commit on a counter row), the rest from the partial indexes
// of rows in flight or queued and the indexes of the window's rows.
func (s *Store) Stats(ctx context.Context, p *store.StatsParams) (*store.Stats, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	defer tx.Rollback(ctx)
	now, err := s.at(ctx, tx, p.Now)
	if err != nil {
		return nil, err
	}
	st := rules.NewStats(p, now, rules.StatsWindow(p))
	b := rules.StatsBounds(st)
	since := b.Since

	counters, err := readCounters(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	rules.SetCounters(st, counters)
	rs, err := tx.Query(ctx, "SELECT identity, state, sum(n)::bigint FROM (SELECT identity, state, n FROM state_counts "+
		"UNION ALL SELECT identity, state, n FROM state_count_deltas) c GROUP BY identity, state HAVING sum(n) > 0 ORDER BY identity, state")
	if err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	for rs.Next() {
		var c store.StateCount
		var stt string
		if err := rs.Scan(&c.Identity, &stt, &c.N); err != nil {
			rs.Close()
			return nil, fmt.Errorf("postgres: stats: %w", err)
		}
		c.State = state.State(stt)
		rules.AddCount(st, c)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}

	for _, lane := range []string{store.LaneReply, store.LaneBulk} {
		var due *time.Time
		err := tx.QueryRow(ctx, "SELECT min(next_attempt_at) FROM (SELECT next_attempt_at FROM messages "+
			"WHERE state = 'queued' AND lane = $1 AND next_attempt_at <= $2 AND (expires_at IS NULL OR expires_at > $2) "+
			"AND identity NOT IN (SELECT name FROM identities WHERE paused) ORDER BY lane DESC, next_attempt_at LIMIT 1) AS o",
			lane, now).Scan(&due)
		if err != nil {
			return nil, fmt.Errorf("postgres: stats: %w", err)
		}
		if due != nil {
			rules.AddDue(st, *due)
		}
	}
	// Through messages_intake (0026): ids are ULIDs, so the first is the
	// oldest, and the read costs the intake rows', not the table's.
	var intake time.Time
	switch err := tx.QueryRow(ctx, "SELECT created_at FROM messages WHERE state = 'intake' ORDER BY id LIMIT 1").Scan(&intake); {
	case err == nil:
		t := intake.UTC()
		st.OldestIntake = &t
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM messages WHERE state IN ('sending', 'unknown') AND state = 'sending' AND lease_until <= $1",
		b.LeaseOver).Scan(&st.SendingPastLease); err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	if err := webhookStats(ctx, tx, &st.WebhookStats); err != nil {
		return nil, err
	}
	if err := vitalStats(ctx, tx, p, st); err != nil {
		return nil, err
	}
	var offUS *int64
	var offProc *string
	if err := tx.QueryRow(ctx, "SELECT offset_us, process FROM clock_offsets WHERE measured_at >= $1 ORDER BY abs(offset_us) DESC, process LIMIT 1",
		now.Add(-store.ClockOffsetRecent)).Scan(&offUS, &offProc); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: stats: clock offsets: %w", err)
	}
	if offUS != nil {
		st.ClockOffset, st.ClockOffsetProcess = time.Duration(*offUS)*time.Microsecond, *offProc
	}
	rs, err = tx.Query(ctx, "SELECT class, count(*) FROM attempts WHERE finished_at >= $1 GROUP BY class", since)
	if err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	for rs.Next() {
		var class string
		var n int
		if err := rs.Scan(&class, &n); err != nil {
			rs.Close()
			return nil, fmt.Errorf("postgres: stats: %w", err)
		}
		st.AttemptsByClass[class] = n
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}

	rs, err = tx.Query(ctx, "SELECT extract(epoch FROM h.at - (SELECT max(s.at) FROM history s WHERE s.message_id = h.message_id AND s.to_state = 'sent' AND s.applied)) * 1000000 "+
		"FROM history h WHERE h.to_state = 'delivered' AND h.applied AND h.at >= $1 ORDER BY h.at DESC LIMIT $2", since, store.LatencySample)
	if err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	var lat []time.Duration
	for rs.Next() {
		st.Delivered++
		var us *float64
		if err := rs.Scan(&us); err != nil {
			rs.Close()
			return nil, fmt.Errorf("postgres: stats: %w", err)
		}
		if us != nil {
			lat = append(lat, time.Duration(*us)*time.Microsecond)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: stats: %w", err)
	}
	rules.SetLatencies(st, lat)
	return st, nil
}

// purgeBatch bounds one purge transaction.
const purgeBatch = 1000

// MessagePurge drops payloads of finished rows created before p.Before,
// walking the primary key (ids order rows by creation) in batches.
func (s *Store) MessagePurge(ctx context.Context, p *store.PurgeParams) (int, error) {
	where := "id < $1 AND state IN ('sent', 'delivered', 'read', 'failed') AND payload IS NOT NULL"
	args := []any{store.IDBefore(p.Before)}
	if p.Purpose != "" {
		args = append(args, p.Purpose)
		where += " AND purpose = $" + strconv.Itoa(len(args))
	}
	if p.Tenant != "" {
		args = append(args, p.Tenant)
		where += " AND tenant = $" + strconv.Itoa(len(args))
	}
	if p.DryRun {
		var n int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM messages WHERE "+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("postgres: purge: %w", err)
		}
		return n, nil
	}
	total := 0
	for {
		var n int
		err := s.inTx(ctx, "purge", func(tx pgx.Tx) error {
			rs, err := tx.Query(ctx, "UPDATE messages SET payload = NULL, last_error = '' WHERE id IN "+
				"(SELECT id FROM messages WHERE "+where+" LIMIT "+strconv.Itoa(purgeBatch)+" FOR UPDATE SKIP LOCKED) RETURNING id", args...)
			if err != nil {
				return fmt.Errorf("postgres: purge: %w", err)
			}
			ids, err := pgx.CollectRows(rs, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("postgres: purge: %w", err)
			}
			n = len(ids)
			if n == 0 {
				return nil
			}
			if _, err := tx.Exec(ctx, "UPDATE attempts SET raw_error = '' WHERE message_id = ANY($1) AND raw_error <> ''", ids); err != nil {
				return fmt.Errorf("postgres: purge attempts: %w", err)
			}
			return nil
		})
		total += n
		if err != nil || n < purgeBatch {
			return total, err
		}
	}
}
