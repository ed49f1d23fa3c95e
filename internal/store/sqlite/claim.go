package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// expireBatch bounds how many past-deadline rows one claim fails.
const expireBatch = 500

// MessageClaim leases due rows in one immediate (write-locked) transaction:
// SQLite has one writer, so two drains never see the same queued row.
func (s *Store) MessageClaim(ctx context.Context, p *store.ClaimParams) ([]store.Claimed, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer tx.Rollback()
	// The clock is read once the write lock is held: a claim that waited
	// for it (other drains, a long enqueue) must not hand out pacing
	// slots counted from before its wait, which have passed by now, so
	// that two calls to a recipient would start together.
	now, horizon := p.Window(s.now)

	if err := s.expireDue(ctx, tx, now); err != nil {
		return nil, err
	}

	// Rows whose recipient has no slot within the horizon are left out
	// here, not after the LIMIT: a recipient with a long queue must not
	// starve everyone behind it.
	where := []string{"state = 'queued'", "next_attempt_at <= ?", "(expires_at IS NULL OR expires_at > ?)",
		"identity NOT IN (SELECT name FROM identities WHERE paused = 1)",
		"NOT EXISTS (SELECT 1 FROM recipient_pace rp WHERE rp.identity = messages.identity AND rp.recipient = messages.recipient AND rp.next_at >= ?)"}
	args := []any{micros(now), micros(now), micros(now.Add(horizon))}
	if p.Lane != "" {
		where, args = append(where, "lane = ?"), append(args, p.Lane)
	}
	if len(p.Identities) > 0 {
		where = append(where, "identity IN ("+strings.TrimSuffix(strings.Repeat("?,", len(p.Identities)), ",")+")")
		for _, id := range p.Identities {
			args = append(args, id)
		}
	}
	// Over-fetch: pacing may pass over some candidates (a recipient
	// messaged moments ago) in favour of later ones.
	args = append(args, p.Limit*4+16)
	// lane DESC puts "reply" before "bulk"; the partial index messages_due
	// serves this order.
	rs, err := tx.QueryContext(ctx, "SELECT "+messageCols+" FROM messages WHERE "+strings.Join(where, " AND ")+
		" ORDER BY lane DESC, next_attempt_at, id LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	var cands []*store.Message
	for rs.Next() {
		m, err := scanMessage(rs)
		if err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: claim: %w", err)
		}
		cands = append(cands, m)
	}
	if err := rs.Close(); err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	if len(cands) == 0 {
		return nil, tx.Commit()
	}

	pace, err := loadPace(ctx, tx, cands, p.Pacing)
	if err != nil {
		return nil, err
	}
	lease, err := rules.NewLease(p, now)
	if err != nil {
		return nil, err
	}
	if lease.Daily, err = loadDaily(ctx, tx, cands, p.DailyRecipients, now); err != nil {
		return nil, err
	}
	claimed := lease.Take(cands, pace, p.Limit, horizon)
	if err := saveDaily(ctx, tx, lease.Daily, now); err != nil {
		return nil, err
	}
	if len(claimed) == 0 {
		return nil, tx.Commit()
	}
	for start := 0; start < len(claimed); start += insertChunk {
		chunk := claimed[start:min(start+insertChunk, len(claimed))]
		args := []any{string(lease.To), lease.Owner, micros(lease.Until), micros(lease.At)}
		hargs := make([]any, 0, len(chunk)*historyColN)
		for _, c := range chunk {
			args = append(args, c.ID)
			hargs = append(hargs, c.ID, string(lease.From), string(lease.To), "", lease.Event, 1,
				lease.Source, lease.Detail, micros(lease.At), nil)
		}
		r, err := tx.ExecContext(ctx, "UPDATE messages SET state = ?, lease_owner = ?, lease_until = ?, attempts = attempts + 1, "+
			"updated_at = ? WHERE state = 'queued' AND id IN ("+strings.TrimSuffix(strings.Repeat("?,", len(chunk)), ",")+")", args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: claim: %w", err)
		}
		if n, _ := r.RowsAffected(); int(n) != len(chunk) {
			return nil, fmt.Errorf("sqlite: claim: %d of %d rows changed under the write lock", n, len(chunk))
		}
		// seq: one more than the row's last history entry.
		q := "INSERT INTO history (" + historyInsertCols + ") SELECT v.column1, v.column2, v.column3, v.column4, v.column5, " +
			"v.column6, v.column7, v.column8, v.column9, (SELECT coalesce(max(seq), 0) + 1 FROM history h WHERE h.message_id = v.column1) " +
			"FROM (VALUES " + placeholders(len(chunk), historyColN) + ") v"
		if _, err := tx.ExecContext(ctx, q, hargs...); err != nil {
			return nil, fmt.Errorf("sqlite: claim history: %w", err)
		}
	}
	if err := savePace(ctx, tx, pace); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: claim: commit: %w", err)
	}
	return claimed, nil
}

// expireDue ends queued rows whose deadline has passed, as rules.Expire
// decides.
func (s *Store) expireDue(ctx context.Context, tx *sql.Tx, now time.Time) error {
	rs, err := tx.QueryContext(ctx, "SELECT id, maybe_sent FROM messages WHERE state = 'queued' "+
		"AND expires_at IS NOT NULL AND expires_at <= ? LIMIT ?", micros(now), expireBatch)
	if err != nil {
		return fmt.Errorf("sqlite: expire: %w", err)
	}
	type due struct {
		id        string
		maybeSent bool
	}
	var rows []due
	for rs.Next() {
		var d due
		if err := rs.Scan(&d.id, &d.maybeSent); err != nil {
			rs.Close()
			return fmt.Errorf("sqlite: expire: %w", err)
		}
		rows = append(rows, d)
	}
	if err := rs.Close(); err != nil {
		return fmt.Errorf("sqlite: expire: %w", err)
	}
	for _, d := range rows {
		x, err := rules.Expire(d.maybeSent)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE messages SET state = ?, reason = ?, updated_at = ? WHERE id = ? AND state = 'queued'",
			string(x.Result.To), string(x.Result.Reason), micros(now), d.id); err != nil {
			return fmt.Errorf("sqlite: expire: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO history ("+historyInsertCols+") SELECT ?, ?, ?, ?, ?, 1, ?, ?, ?, "+
			"coalesce(max(seq), 0) + 1 FROM history WHERE message_id = ?",
			d.id, string(state.Queued), string(x.Result.To), string(x.Result.Reason), x.Event.String(), store.SourceDrain, x.Detail, micros(now), d.id); err != nil {
			return fmt.Errorf("sqlite: expire history: %w", err)
		}
	}
	return nil
}

// loadPace reads the stored slots a claim over cands needs.
func loadPace(ctx context.Context, tx *sql.Tx, cands []*store.Message, limits map[string]store.Pacing) (*store.Pacer, error) {
	pc := store.NewPacer(limits)
	ids, pairs := pc.Need(cands)
	for _, id := range ids {
		var next int64
		err := tx.QueryRowContext(ctx, "SELECT next_at FROM identity_pace WHERE identity = ?", id).Scan(&next)
		switch {
		case err == nil:
			pc.LoadIdentity(id, fromMicros(next))
		case errors.Is(err, sql.ErrNoRows):
		default:
			return nil, fmt.Errorf("sqlite: claim pacing: %w", err)
		}
	}
	const chunk = 400
	for start := 0; start < len(pairs); start += chunk {
		part := pairs[start:min(start+chunk, len(pairs))]
		args := make([]any, 0, 2*len(part))
		for _, k := range part {
			args = append(args, k.Identity, k.Recipient)
		}
		rs, err := tx.QueryContext(ctx, "SELECT identity, recipient, next_at FROM recipient_pace WHERE (identity, recipient) IN (VALUES "+
			placeholders(len(part), 2)+")", args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: claim pacing: %w", err)
		}
		for rs.Next() {
			var k store.Pair
			var next int64
			if err := rs.Scan(&k.Identity, &k.Recipient, &next); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: claim pacing: %w", err)
			}
			pc.LoadRecipient(k, fromMicros(next))
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: claim pacing: %w", err)
		}
	}
	return pc, nil
}

// savePace writes back the slots the claim moved.
func savePace(ctx context.Context, tx *sql.Tx, pc *store.Pacer) error {
	for id, next := range pc.ChangedIdentities() {
		if _, err := tx.ExecContext(ctx, "INSERT INTO identity_pace (identity, next_at) VALUES (?, ?) "+
			"ON CONFLICT (identity) DO UPDATE SET next_at = excluded.next_at", id, micros(next)); err != nil {
			return fmt.Errorf("sqlite: claim pacing: %w", err)
		}
	}
	for k, next := range pc.ChangedRecipients() {
		if _, err := tx.ExecContext(ctx, "INSERT INTO recipient_pace (identity, recipient, next_at) VALUES (?, ?, ?) "+
			"ON CONFLICT (identity, recipient) DO UPDATE SET next_at = excluded.next_at", k.Identity, k.Recipient, micros(next)); err != nil {
			return fmt.Errorf("sqlite: claim pacing: %w", err)
		}
	}
	return nil
}
