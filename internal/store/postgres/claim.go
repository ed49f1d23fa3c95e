package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// expireBatch bounds how many past-deadline rows one claim fails.
const expireBatch = 500

// paceFloor is the slot stored for an identity that has none yet: a claim
// inserts the row only so it can lock it, and a slot long past is the same
// as no slot.
var paceFloor = time.Unix(0, 0).UTC()

// MessageClaim leases due rows in one transaction. Candidates are locked
// FOR UPDATE SKIP LOCKED, so concurrent drains take disjoint rows without
// waiting for each other; the identity_pace rows of paced identities are
// locked FOR UPDATE, which serialises the claims of one paced identity
// (the shared rate needs that) and nothing else. A claim with no limits
// to keep is one statement (claimUnpaced).
func (s *Store) MessageClaim(ctx context.Context, p *store.ClaimParams) ([]store.Claimed, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// No clock read of its own to find the candidates: the statements
	// read the server's clock (now(), one reading for the claim's
	// transaction), unless a time is given (a test clock).
	var start *time.Time
	if !p.Now.IsZero() || s.now != nil {
		t, err := s.at(ctx, nil, p.Now)
		if err != nil {
			return nil, err
		}
		start = &t
	}
	_, horizon := p.Window(time.Now) // the horizon only
	if unpaced(p.Pacing) && !limited(p.DailyRecipients) {
		return s.claimUnpaced(ctx, p, start, horizon)
	}
	var claimed []store.Claimed
	err := s.inTx(ctx, "claim", func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		queueClaimPrelude(b, start)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		where, args := claimWhere(p, start, horizon)
		// Over-fetch: pacing may pass over some candidates (a recipient
		// messaged moments ago) in favour of later ones.
		args = append(args, p.Limit*4+16)
		rs, err := tx.Query(ctx, "SELECT "+messageCols+" FROM messages WHERE "+where+
			" ORDER BY lane DESC, next_attempt_at, id LIMIT $"+strconv.Itoa(len(args))+" FOR UPDATE SKIP LOCKED", args...)
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		msgs, err := collectMessages(rs)
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		if len(msgs) == 0 {
			return nil
		}
		cands := make([]*store.Message, len(msgs))
		for i := range msgs {
			cands[i] = &msgs[i]
		}
		pace, err := loadPace(ctx, tx, cands, p.Pacing)
		if err != nil {
			return err
		}
		daily, err := lockDaily(ctx, tx, cands, p.DailyRecipients)
		if err != nil {
			return err
		}
		// The clock again, now that the identities' slots are locked: a
		// claim that waited for another's lock must not hand out slots
		// counted from before its wait, which have passed by now, so that
		// two calls to a recipient would start together.
		now, err := s.at(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		lease, err := rules.NewLease(p, now)
		if err != nil {
			return err
		}
		if err := loadDaily(ctx, tx, daily, cands, now); err != nil {
			return err
		}
		lease.Daily = daily
		claimed = lease.Take(cands, pace, p.Limit, horizon)
		if err := saveDaily(ctx, tx, daily, now); err != nil {
			return err
		}
		if len(claimed) == 0 {
			return nil
		}
		ids := make([]string, len(claimed))
		for i := range claimed {
			ids[i] = claimed[i].ID
		}
		// By id alone: the candidate SELECT locked these rows while they
		// were queued, and the row count below confirms it. A "state =
		// 'queued'" here matches the messages_due predicate, and with
		// stale statistics the planner then scans that whole index for
		// the ids (54 ms for 30 rows over 20,000) instead of the key.
		tag, err := tx.Exec(ctx, "UPDATE messages SET state = $1, lease_owner = $2, lease_until = $3, attempts = attempts + 1, "+
			"updated_at = $4 WHERE id = ANY($5::text[])", string(lease.To), lease.Owner, lease.Until, lease.At, ids)
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		if n := int(tag.RowsAffected()); n != len(ids) {
			return fmt.Errorf("postgres: claim: %d of %d locked rows changed", n, len(ids))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO history (message_id, from_state, to_state, reason, event, applied, source, detail, at, seq) "+
			"SELECT v.id, $2, $3, '', $4, true, $5, $6, $7, (SELECT coalesce(max(seq), 0) + 1 FROM history h WHERE h.message_id = v.id) "+
			"FROM unnest($1::text[]) AS v(id)",
			ids, string(lease.From), string(lease.To), lease.Event, lease.Source, lease.Detail, lease.At); err != nil {
			return fmt.Errorf("postgres: claim history: %w", err)
		}
		return savePace(ctx, tx, pace)
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// unpaced says no identity of a claim has a configured limit, so no slot
// needs reserving: the claim only reads the slots a rate limit's deferral
// left (PaceDefer), which needs no lock.
func unpaced(limits map[string]store.Pacing) bool {
	for _, l := range limits {
		if l.Spacing > 0 || l.PerRecipient > 0 {
			return false
		}
	}
	return true
}

// claimWhere is what makes a row claimable: due, queued, in a deadline,
// its identity not paused, and its recipient (PaceDefer, or a paced claim)
// not held beyond the horizon. Rows held back are left out here, not
// after the LIMIT: a recipient with a long queue must not starve everyone
// behind it. The recipient's slot is looked up per candidate by its key
// (OFFSET 0 keeps the planner from turning the NOT EXISTS into an
// anti-join, which it planned as a read of all of recipient_pace: a row
// for every recipient ever paced). $1 is now (NULL: the server's clock, claimNow) and $2 the
// horizon in microseconds (claimHorizonEnd).
func claimWhere(p *store.ClaimParams, now *time.Time, horizon time.Duration) (string, []any) {
	where := []string{"state = 'queued'", "next_attempt_at <= " + claimNow, "(expires_at IS NULL OR expires_at > " + claimNow + ")",
		"identity NOT IN (SELECT name FROM identities WHERE paused)",
		"NOT EXISTS (SELECT 1 FROM recipient_pace rp WHERE rp.identity = messages.identity AND rp.recipient = messages.recipient AND rp.next_at >= " + claimHorizonEnd + " OFFSET 0)"}
	args := []any{now, horizon.Microseconds()}
	if p.Lane != "" {
		args = append(args, p.Lane)
		where = append(where, "lane = $"+strconv.Itoa(len(args)))
	}
	if len(p.Identities) > 0 {
		args = append(args, p.Identities)
		where = append(where, "identity = ANY($"+strconv.Itoa(len(args))+"::text[])")
	}
	return strings.Join(where, " AND "), args
}

// claimNow is a claim's time in its SQL: $1 when the caller gave one (a
// test clock, or a time the transaction read), else the database server's
// clock at the start of the claim's transaction, one reading for all its
// statements. claimHorizonEnd is the end of the pacing horizon ($2, in
// microseconds, after it).
const (
	claimNow        = "coalesce($1::timestamptz, now())"
	claimHorizonEnd = "(" + claimNow + " + $2::bigint * interval '1 microsecond')"
)

// claimSettingsSQL is the claim transaction's planner settings (see
// queueClaimPrelude). With sorts off, any plan that sorts (a trigger's
// ORDER BY, fired by the claim's history rows) is priced at about 1e10,
// far past jit_above_cost, and PostgreSQL then compiled it with LLVM on
// every claim: 1 to 2 s of server CPU a claim once an event endpoint
// existed. The claim's statements are a few index look-ups; JIT never
// pays for them, so it is off too.
const claimSettingsSQL = "SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true), " +
	"set_config('jit', 'off', true)"

// queueClaimPrelude queues what every claim does first: steer the planner
// to messages_due, and end the queued rows whose deadline has passed.
//
// A queue fills and drains faster than autovacuum re-analyses it: with
// statistics from when the table was empty, the planner reads every due
// row and sorts them (56 ms a claim over 20,000 rows, against under 1 ms
// reading messages_due in order). The claim's best plan never changes, so
// say so. (Turning off sequential scans as well made claims far slower:
// the small tables' scans are the right plans.)
func queueClaimPrelude(b *pgx.Batch, now *time.Time) {
	b.Queue(claimSettingsSQL)
	expired, err1 := rules.Expire(false)
	abandoned, err2 := rules.Expire(true)
	if err := errors.Join(err1, err2); err != nil {
		panic(err) // the machine's own table: covered by its tests
	}
	b.Queue(expireSQL, now, expireBatch,
		string(expired.Result.To), string(expired.Result.Reason), expired.Event.String(), expired.Detail,
		string(abandoned.Result.To), string(abandoned.Result.Reason), abandoned.Event.String(), abandoned.Detail, store.SourceDrain)
}

// expireSQL ends queued rows whose deadline has passed, with their history
// rows, in one statement: a row none of whose calls can have gone out
// fails as expired; one whose earlier call may have (maybe_sent) becomes
// unknown, for a person to decide. Both of rules.Expire's answers are
// passed in ($3 to $6 expired, $7 to $10 abandoned), and the row's
// maybe_sent picks one. Rows another transaction holds are
// left for a later claim. The update finds its rows by their ids (an
// array, so always the primary key): a join with e could be planned as a
// scan of all of messages, whose cost grows with every finished row. The
// rows are taken in deadline order, which only messages_expiring gives:
// without the order, statistics taken while nothing was queued (as after a
// quiet night) priced messages_due the same, and a plan on it read every
// queued row at every claim to find none past its deadline.
const expireSQL = `WITH e AS (
	SELECT id, maybe_sent FROM messages WHERE state = 'queued' AND expires_at IS NOT NULL AND expires_at <= coalesce($1::timestamptz, now())
	ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
), u AS (
	UPDATE messages m SET
		state = CASE WHEN m.maybe_sent THEN $7 ELSE $3 END,
		reason = CASE WHEN m.maybe_sent THEN $8 ELSE $4 END,
		updated_at = coalesce($1::timestamptz, now())
	WHERE m.id = ANY(ARRAY(SELECT id FROM e))
	RETURNING m.id, m.maybe_sent
)
INSERT INTO history (message_id, from_state, to_state, reason, event, applied, source, detail, at, seq)
SELECT u.id, 'queued',
	CASE WHEN u.maybe_sent THEN $7 ELSE $3 END,
	CASE WHEN u.maybe_sent THEN $8 ELSE $4 END,
	CASE WHEN u.maybe_sent THEN $9 ELSE $5 END,
	true, $11,
	CASE WHEN u.maybe_sent THEN $10 ELSE $6 END,
	coalesce($1::timestamptz, now()), (SELECT coalesce(max(h.seq), 0) + 1 FROM history h WHERE h.message_id = u.id)
FROM u`

// claimUnpaced is a claim that reserves no slots: one statement selects
// (SKIP LOCKED), leases and writes the history of the rows, and returns
// each with the slot a deferral may have left (the later of its
// identity's and its recipient's: the recipient's by its key, one probe
// per row, where a join was planned as a read of all of recipient_pace,
// a row for every recipient ever paced). The lease is written by the locked
// rows' ids (an array, so always the primary key), never by a join the
// planner could turn into a scan of the whole table.
func (s *Store) claimUnpaced(ctx context.Context, p *store.ClaimParams, now *time.Time, horizon time.Duration) ([]store.Claimed, error) {
	// The statement reads the clock: the lease's time and end are its.
	lease, err := rules.NewLease(p, time.Time{})
	if err != nil {
		return nil, err
	}
	where, args := claimWhere(p, now, horizon)
	where += " AND identity NOT IN (SELECT identity FROM identity_pace WHERE next_at >= " + claimHorizonEnd + ")"
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	q := `WITH c AS (
	SELECT id FROM messages WHERE ` + where + `
	ORDER BY lane DESC, next_attempt_at, id LIMIT ` + arg(p.Limit) + ` FOR UPDATE SKIP LOCKED
), u AS (
	UPDATE messages m SET state = ` + arg(string(lease.To)) + `, lease_owner = ` + arg(lease.Owner) + `, lease_until = ` + claimNow + ` + ` + arg(p.LeaseFor.Microseconds()) + `::bigint * interval '1 microsecond',
		attempts = m.attempts + 1, updated_at = ` + claimNow + `
	WHERE m.id = ANY(ARRAY(SELECT id FROM c))
	RETURNING m.*
), h AS (
	INSERT INTO history (message_id, from_state, to_state, reason, event, applied, source, detail, at, seq)
	SELECT u.id, ` + arg(string(lease.From)) + `, u.state, '', ` + arg(lease.Event) + `, true, ` + arg(lease.Source) + `, ` + arg(lease.Detail) + `, ` + claimNow + `,
		(SELECT coalesce(max(hh.seq), 0) + 1 FROM history hh WHERE hh.message_id = u.id)
	FROM u
)
SELECT ` + prefixed("u.", messageCols) + `, greatest(u.updated_at, ip.next_at, rp.next_at)
FROM u LEFT JOIN identity_pace ip ON ip.identity = u.identity
	LEFT JOIN LATERAL (SELECT next_at FROM recipient_pace WHERE identity = u.identity AND recipient = u.recipient OFFSET 0) rp ON true`
	var claimed []store.Claimed
	err = func() error {
		// One batch, one round trip: PostgreSQL runs what comes before the
		// batch's Sync as one transaction and commits it at the Sync, so
		// the claim is durable once br.Close has read the answer, before
		// any call is made. (set_config(..., true) lasts as long as that
		// transaction.)
		b := &pgx.Batch{}
		queueClaimPrelude(b, now)
		b.Queue(q, args...)
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("postgres: claim: %w", err)
			}
		}
		rs, err := br.Query()
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		defer rs.Close()
		for rs.Next() {
			var slot time.Time
			m, err := scanMessage(withExtra(rs, &slot))
			if err != nil {
				return fmt.Errorf("postgres: claim: %w", err)
			}
			claimed = append(claimed, store.Claimed{Message: *m, SlotAt: slot.UTC()})
		}
		if err := rs.Err(); err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		rs.Close()
		if err := br.Close(); err != nil {
			return fmt.Errorf("postgres: claim: commit: %w", err)
		}
		return nil
	}()
	if err != nil {
		return nil, err
	}
	// RETURNING has no order: hand rows out as the index gave them.
	sort.Slice(claimed, func(i, j int) bool {
		a, b := &claimed[i].Message, &claimed[j].Message
		if a.Lane != b.Lane {
			return a.Lane > b.Lane
		}
		if !a.NextAttemptAt.Equal(b.NextAttemptAt) {
			return a.NextAttemptAt.Before(b.NextAttemptAt)
		}
		return a.ID < b.ID
	})
	return claimed, nil
}

// prefixed qualifies each column of a column list.
func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// withExtra scans a row's message columns and then extra trailing ones.
func withExtra(row pgx.Row, extra ...any) pgx.Row { return extraRow{row, extra} }

type extraRow struct {
	pgx.Row
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// loadPace locks the identity slots a claim over cands needs (creating
// missing rows so they can be locked) and reads the recipient slots.
func loadPace(ctx context.Context, tx pgx.Tx, cands []*store.Message, limits map[string]store.Pacing) (*store.Pacer, error) {
	pc := store.NewPacer(limits)
	ids, pairs := pc.Need(cands)
	if len(ids) > 0 {
		// Sorted, so two claims lock shared identities in one order.
		sort.Strings(ids)
		lock := func(ids []string) (found map[string]bool, err error) {
			found = map[string]bool{}
			rs, err := tx.Query(ctx, "SELECT identity, next_at FROM identity_pace WHERE identity = ANY($1::text[]) ORDER BY identity FOR UPDATE", ids)
			if err != nil {
				return nil, fmt.Errorf("postgres: claim pacing: %w", err)
			}
			defer rs.Close()
			for rs.Next() {
				var id string
				var next time.Time
				if err := rs.Scan(&id, &next); err != nil {
					return nil, fmt.Errorf("postgres: claim pacing: %w", err)
				}
				pc.LoadIdentity(id, next.UTC())
				found[id] = true
			}
			if err := rs.Err(); err != nil {
				return nil, fmt.Errorf("postgres: claim pacing: %w", err)
			}
			return found, nil
		}
		found, err := lock(ids)
		if err != nil {
			return nil, err
		}
		// Rows are created only the first time an identity is paced: an
		// INSERT ... ON CONFLICT DO NOTHING on every claim measured 36 ms
		// against the existing row, most of a claim's time.
		var missing []string
		for _, id := range ids {
			if !found[id] {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			if _, err := tx.Exec(ctx, "INSERT INTO identity_pace (identity, next_at) SELECT i, $2 FROM unnest($1::text[]) AS i ORDER BY i "+
				"ON CONFLICT (identity) DO NOTHING", missing, paceFloor); err != nil {
				return nil, fmt.Errorf("postgres: claim pacing: %w", err)
			}
			if _, err := lock(missing); err != nil {
				return nil, err
			}
		}
	}
	if len(pairs) > 0 {
		// One primary-key look-up per pair whatever the table's size (it
		// keeps a row for every recipient ever paced): a join with the
		// pairs, or "= ANY" of them, was planned as a read of all of
		// recipient_pace once a claim had a few hundred recipients.
		// (LATERAL ... OFFSET 0 keeps the pairs on the outer side.)
		idents, rcpts := make([]string, len(pairs)), make([]string, len(pairs))
		for i, k := range pairs {
			idents[i], rcpts[i] = k.Identity, k.Recipient
		}
		rs, err := tx.Query(ctx, "SELECT rp.identity, rp.recipient, rp.next_at FROM unnest($1::text[], $2::text[]) AS u(i, r) "+
			"CROSS JOIN LATERAL (SELECT identity, recipient, next_at FROM recipient_pace WHERE identity = u.i AND recipient = u.r OFFSET 0) rp",
			idents, rcpts)
		if err != nil {
			return nil, fmt.Errorf("postgres: claim pacing: %w", err)
		}
		for rs.Next() {
			var k store.Pair
			var next time.Time
			if err := rs.Scan(&k.Identity, &k.Recipient, &next); err != nil {
				rs.Close()
				return nil, fmt.Errorf("postgres: claim pacing: %w", err)
			}
			pc.LoadRecipient(k, next.UTC())
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, fmt.Errorf("postgres: claim pacing: %w", err)
		}
	}
	return pc, nil
}

// savePace writes back the slots the claim moved.
func savePace(ctx context.Context, tx pgx.Tx, pc *store.Pacer) error {
	var ids []string
	var idNext []time.Time
	for id, next := range pc.ChangedIdentities() {
		ids, idNext = append(ids, id), append(idNext, next)
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, "INSERT INTO identity_pace (identity, next_at) SELECT * FROM unnest($1::text[], $2::timestamptz[]) "+
			"ON CONFLICT (identity) DO UPDATE SET next_at = excluded.next_at", ids, idNext); err != nil {
			return fmt.Errorf("postgres: claim pacing: %w", err)
		}
	}
	var idents, rcpts []string
	var rNext []time.Time
	for k, next := range pc.ChangedRecipients() {
		idents, rcpts, rNext = append(idents, k.Identity), append(rcpts, k.Recipient), append(rNext, next)
	}
	if len(idents) > 0 {
		if _, err := tx.Exec(ctx, "INSERT INTO recipient_pace (identity, recipient, next_at) "+
			"SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) "+
			"ON CONFLICT (identity, recipient) DO UPDATE SET next_at = excluded.next_at", idents, rcpts, rNext); err != nil {
			return fmt.Errorf("postgres: claim pacing: %w", err)
		}
	}
	return nil
}
