package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// sqlQ is what reads a challenge: the reader pool or a transaction.
type sqlQ interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

const challengeCols = `id, tenant, key, body_hash, deadline, accept_duplicate_risk, fallback_undelivered, supersedes,
	outcome, by_step, blocked_step, why, next_at, created_at, updated_at`

// loadChallenge reads the challenge matching where (nil, nil when none)
// with its steps' rows.
func loadChallenge(ctx context.Context, q sqlQ, where string, args ...any) (*store.Challenge, error) {
	var (
		c                store.Challenge
		deadline, next   sql.NullInt64
		created, updated int64
	)
	err := q.QueryRowContext(ctx, "SELECT "+challengeCols+" FROM challenges WHERE "+where, args...).Scan(&c.ID, &c.Tenant, &c.Key,
		&c.BodyHash, &deadline, &c.AcceptDuplicateRisk, &c.FallbackUndelivered, &c.Supersedes, &c.Outcome, &c.By, &c.Blocked,
		&c.Why, &next, &created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: challenge: %w", err)
	}
	c.Deadline, c.NextAt = fromNullMicros(deadline), fromNullMicros(next)
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	rs, err := q.QueryContext(ctx, "SELECT "+messageCols+", cs.step, cs.release_at, cs.released, cs.why FROM challenge_steps cs "+
		"JOIN messages ON messages.id = cs.message_id WHERE cs.challenge_id = ? ORDER BY cs.step", c.ID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: challenge steps: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var st store.ChallengeStep
		var rel int64
		m, err := scanMessage(extra{rs, []any{&st.Step, &rel, &st.Released, &st.Why}})
		if err != nil {
			return nil, fmt.Errorf("sqlite: challenge steps: %w", err)
		}
		st.ReleaseAt, st.Message = fromMicros(rel), *m
		c.Steps = append(c.Steps, st)
	}
	return &c, rs.Err()
}

// ChallengeGet finds a challenge by its key, or by one of its steps.
func (s *Store) ChallengeGet(ctx context.Context, tenant, ref string) (*store.Challenge, error) {
	if tenant == "" {
		tenant = store.DefaultTenant
	}
	c, err := loadChallenge(ctx, s.r, "tenant = ? AND key = ?", tenant, ref)
	if err == nil && c == nil {
		c, err = loadChallenge(ctx, s.r, "id = (SELECT cs.challenge_id FROM challenge_steps cs JOIN messages m ON m.id = cs.message_id "+
			"WHERE m.tenant = ? AND (m.id = ? OR m.key = ?))", tenant, ref, ref)
	}
	if err == nil && c == nil {
		err = store.ErrNotFound
	}
	return c, err
}

// ChallengeEnqueue writes a challenge: the use case is
// rules.ChallengeEnqueue's, this store's statements challengeTx's.
func (s *Store) ChallengeEnqueue(ctx context.Context, p *store.ChallengeParams) (*store.ChallengeResult, error) {
	return rules.ChallengeEnqueue(ctx, challenger{enqueuer{s}}, p)
}

// challenger is the store as rules.ChallengeDriver.
type challenger struct{ enqueuer }

func (c challenger) ChallengeTx(ctx context.Context, fn func(rules.ChallengeTx) error) error {
	return c.s.writeTx(ctx, "challenge enqueue", func(tx *sql.Tx) error { return fn(challengeTx{c.s, tx}) })
}

// challengeTx is a challenge enqueue's write transaction as
// rules.ChallengeTx.
type challengeTx struct {
	s  *Store
	tx *sql.Tx
}

func (t challengeTx) ChallengeInsert(ctx context.Context, c *store.Challenge, now time.Time) (bool, error) {
	r, err := t.tx.ExecContext(ctx, "INSERT INTO challenges ("+challengeCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "+
		"ON CONFLICT (tenant, key) DO NOTHING",
		c.ID, c.Tenant, c.Key, c.BodyHash, nullTime(c.Deadline), c.AcceptDuplicateRisk, c.FallbackUndelivered, c.Supersedes,
		c.Outcome, c.By, c.Blocked, c.Why, nullTime(c.NextAt), micros(now), micros(now))
	if err != nil {
		return false, fmt.Errorf("sqlite: challenge enqueue: %w", err)
	}
	n, err := r.RowsAffected()
	return n == 1, err
}

// ChallengeByKey needs no lock: the transaction holds the single writer.
func (t challengeTx) ChallengeByKey(ctx context.Context, tenant, key string, _ bool) (*store.Challenge, error) {
	return loadChallenge(ctx, t.tx, "tenant = ? AND key = ?", tenant, key)
}

func (t challengeTx) StepCancel(ctx context.Context, x rules.StepCancel, now time.Time) (bool, error) {
	return cancelStep(ctx, t.tx, x, store.SourceSend, now)
}

func (t challengeTx) StepWhy(ctx context.Context, challengeID string, step int, why string) error {
	if _, err := t.tx.ExecContext(ctx, "UPDATE challenge_steps SET why = ? WHERE challenge_id = ? AND step = ?", why, challengeID, step); err != nil {
		return fmt.Errorf("sqlite: supersede: %w", err)
	}
	return nil
}

func (t challengeTx) ChallengeSupersede(ctx context.Context, id, why string, now time.Time) error {
	if _, err := t.tx.ExecContext(ctx, "UPDATE challenges SET outcome = ?, why = ?, next_at = NULL, updated_at = ? WHERE id = ? AND outcome = 'open'",
		store.ChallengeSuperseded, why, micros(now), id); err != nil {
		return fmt.Errorf("sqlite: supersede: %w", err)
	}
	return nil
}

func (t challengeTx) MessageInsertOne(ctx context.Context, m *store.Message, now time.Time) (bool, error) {
	payload, _ := json.Marshal(m.Payload)
	var exp time.Time
	if m.ExpiresAt != nil {
		exp = *m.ExpiresAt
	}
	var id string
	err := t.tx.QueryRowContext(ctx, insertMessagesSQL(1), m.ID, m.Tenant, m.Key, m.BodyHash, m.To, m.Channel, m.Identity,
		m.Purpose, m.TriggerRef, m.Lane, string(payload), string(m.State),
		micros(m.NextAttemptAt), nullMicros(exp), m.ResendOf, micros(now), micros(now)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sqlite: challenge enqueue: %w", err)
	}
	return true, nil
}

func (t challengeTx) MessageIDByKey(ctx context.Context, tenant, key string) (string, error) {
	var id string
	if err := t.tx.QueryRowContext(ctx, "SELECT id FROM messages WHERE tenant = ? AND key = ?", tenant, key).Scan(&id); err != nil {
		return "", fmt.Errorf("sqlite: challenge enqueue: %w", err)
	}
	return id, nil
}

func (t challengeTx) StepInsert(ctx context.Context, id string, st store.ChallengeStep, m *store.Message) error {
	if _, err := t.tx.ExecContext(ctx, "INSERT INTO challenge_steps (challenge_id, step, message_id, release_at, released, why, seen_state) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?)", id, st.Step, m.ID, micros(st.ReleaseAt), st.Released, st.Why, string(m.State)); err != nil {
		return fmt.Errorf("sqlite: challenge enqueue: %w", err)
	}
	return nil
}

func (t challengeTx) CreationHistory(ctx context.Context, ms []*store.Message, now time.Time) error {
	return t.s.insertCreationHistory(ctx, t.tx, ms, now)
}

func (t challengeTx) CountRefused(ctx context.Context, now time.Time, replays, conflicts int) error {
	return countRefusedWrites(ctx, t.tx, now, replays, conflicts)
}

// ChallengeTick applies the due challenges' plans: the use case is
// rules.ChallengeTickDue's, this store's statements tickTx's.
func (s *Store) ChallengeTick(ctx context.Context, p *store.TickParams) (int, error) {
	return rules.ChallengeTickDue(ctx, ticker{s}, p)
}

// ticker is the store as rules.TickDriver.
type ticker struct{ s *Store }

func (t ticker) TickClock(_ context.Context, at time.Time) (time.Time, error) {
	if !at.IsZero() {
		return at, nil
	}
	return t.s.clock(), nil
}

func (t ticker) ChallengesDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rs, err := t.s.r.QueryContext(ctx, "SELECT id FROM challenges c WHERE outcome = 'open' AND ((next_at IS NOT NULL AND next_at <= ?) "+
		"OR EXISTS (SELECT 1 FROM challenge_steps cs JOIN messages m ON m.id = cs.message_id WHERE cs.challenge_id = c.id AND m.state <> cs.seen_state)) "+
		"ORDER BY next_at LIMIT ?", micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: challenge tick: %w", err)
	}
	var ids []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: challenge tick: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rs.Close(); err != nil {
		return nil, fmt.Errorf("sqlite: challenge tick: %w", err)
	}
	return ids, nil
}

func (t ticker) TickTx(ctx context.Context, fn func(rules.TickTx) error) error {
	return t.s.writeTx(ctx, "challenge tick", func(tx *sql.Tx) error { return fn(tickTx{t, tx}) })
}

// tickTx is one challenge's tick as rules.TickTx: the transaction holds
// the single writer, so what it reads stays as read.
type tickTx struct {
	k  ticker
	tx *sql.Tx
}

// Now is read under the write lock the transaction holds.
func (t tickTx) Now(ctx context.Context, at time.Time) (time.Time, error) {
	return t.k.TickClock(ctx, at)
}

func (t tickTx) ChallengeOpen(ctx context.Context, id string) (*store.Challenge, error) {
	return loadChallenge(ctx, t.tx, "id = ? AND outcome = 'open'", id)
}

func (t tickTx) StepCancel(ctx context.Context, x rules.StepCancel, source string, now time.Time) (bool, error) {
	return cancelStep(ctx, t.tx, x, source, now)
}

func (t tickTx) StepRelease(ctx context.Context, challengeID string, step int, messageID string, now time.Time) (bool, error) {
	r, err := t.tx.ExecContext(ctx, "UPDATE messages SET next_attempt_at = ?, updated_at = ? WHERE id = ? AND state = 'queued'",
		micros(now), micros(now), messageID)
	if err != nil {
		return false, fmt.Errorf("sqlite: challenge release: %w", err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return false, nil
	}
	if _, err := t.tx.ExecContext(ctx, "UPDATE challenge_steps SET released = 1 WHERE challenge_id = ? AND step = ?", challengeID, step); err != nil {
		return false, fmt.Errorf("sqlite: challenge release: %w", err)
	}
	return true, nil
}

func (t tickTx) StepWhy(ctx context.Context, challengeID string, step int, why string) error {
	if _, err := t.tx.ExecContext(ctx, "UPDATE challenge_steps SET why = ? WHERE challenge_id = ? AND step = ?", why, challengeID, step); err != nil {
		return fmt.Errorf("sqlite: challenge tick: %w", err)
	}
	return nil
}

func (t tickTx) StepsSeen(ctx context.Context, challengeID string) error {
	if _, err := t.tx.ExecContext(ctx, "UPDATE challenge_steps SET seen_state = (SELECT state FROM messages m WHERE m.id = message_id) "+
		"WHERE challenge_id = ?", challengeID); err != nil {
		return fmt.Errorf("sqlite: challenge tick: %w", err)
	}
	return nil
}

func (t tickTx) ChallengeUpdate(ctx context.Context, id string, plan rules.TickPlan, now time.Time) error {
	if _, err := t.tx.ExecContext(ctx, "UPDATE challenges SET outcome = ?, by_step = ?, blocked_step = ?, why = ?, next_at = ?, updated_at = ? WHERE id = ?",
		plan.Outcome, plan.By, plan.Blocked, plan.Why, nullTime(plan.NextAt), micros(now), id); err != nil {
		return fmt.Errorf("sqlite: challenge tick: %w", err)
	}
	return nil
}

// cancelStep cancels a step that has not gone out, through the machine's
// cancel, with x.Detail in its history; false when the row is no longer
// queued.
func cancelStep(ctx context.Context, tx *sql.Tx, x rules.StepCancel, source string, now time.Time) (bool, error) {
	res := rules.ChallengeCancel()
	r, err := tx.ExecContext(ctx, "UPDATE messages SET state = ?, reason = ?, updated_at = ? WHERE id = ? AND state = 'queued'",
		string(res.To), string(res.Reason), micros(now), x.ID)
	if err != nil {
		return false, fmt.Errorf("sqlite: challenge cancel: %w", err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO history ("+historyInsertCols+") SELECT ?, ?, ?, ?, ?, 1, ?, ?, ?, "+
		"coalesce(max(seq), 0) + 1 FROM history WHERE message_id = ?",
		x.ID, string(state.Queued), string(res.To), string(res.Reason), rules.ChallengeCancelEvent, source, x.Detail, micros(now), x.ID); err != nil {
		return false, fmt.Errorf("sqlite: challenge cancel history: %w", err)
	}
	return true, nil
}

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return micros(*t)
}

// challengeVitals reads store.ChallengeVitals in Stats' read transaction
// (the recent figures from since).
func challengeVitals(ctx context.Context, tx *sql.Tx, now, since time.Time, v *store.ChallengeVitals) error {
	// Open challenges from their partial index; those that ended, the
	// superseding sends and the fallbacks fired are running counts
	// (rules.SetCounters), for ended challenges only ever grow.
	rs, err := tx.QueryContext(ctx, "SELECT blocked_step > 0, count(*) FROM challenges INDEXED BY challenges_open WHERE outcome = 'open' GROUP BY 1")
	if err != nil {
		return fmt.Errorf("sqlite: stats: challenges: %w", err)
	}
	for rs.Next() {
		var n int
		var blocked bool
		if err := rs.Scan(&blocked, &n); err != nil {
			rs.Close()
			return fmt.Errorf("sqlite: stats: challenges: %w", err)
		}
		v.Add("open", 0, blocked, n)
	}
	if err := rs.Close(); err != nil {
		return fmt.Errorf("sqlite: stats: challenges: %w", err)
	}
	for _, q := range []struct {
		sql  string
		args []any
		dst  *int
	}{
		{"SELECT count(*) FROM messages INDEXED BY messages_in_flight WHERE " + inFlight + " AND state = 'unknown' " +
			"AND expires_at IS NOT NULL AND expires_at <= ? AND EXISTS (SELECT 1 FROM challenge_steps cs WHERE cs.message_id = messages.id)",
			[]any{micros(now)}, &v.UnknownPastDeadline},
		{"SELECT count(*) FROM challenges INDEXED BY challenges_expired WHERE outcome = 'expired' AND deadline >= ? AND deadline <= ?",
			[]any{micros(since), micros(now)}, &v.RecentExpired},
	} {
		if err := tx.QueryRowContext(ctx, q.sql, q.args...).Scan(q.dst); err != nil {
			return fmt.Errorf("sqlite: stats: challenges: %w", err)
		}
	}
	// Creation to first delivery: the challenges one of whose steps got
	// delivered evidence within the window (history_delivered, then the
	// unique message_id of challenge_steps), each measured to its first
	// delivered evidence of any step, which must itself be in the window.
	rs, err = tx.QueryContext(ctx, "SELECT first - created_at FROM (SELECT c.created_at, "+
		"(SELECT min(h.at) FROM challenge_steps s JOIN history h ON h.message_id = s.message_id "+
		"WHERE s.challenge_id = c.id AND h.to_state = 'delivered' AND h.applied = 1) AS first FROM challenges c "+
		"WHERE c.id IN (SELECT cs.challenge_id FROM history h INDEXED BY history_delivered JOIN challenge_steps cs ON cs.message_id = h.message_id "+
		"WHERE h.to_state = 'delivered' AND h.applied = 1 AND h.at >= ?)) WHERE first >= ? ORDER BY first DESC LIMIT ?",
		micros(since), micros(since), store.LatencySample)
	if err != nil {
		return fmt.Errorf("sqlite: stats: challenges: %w", err)
	}
	defer rs.Close()
	var lat []time.Duration
	for rs.Next() {
		var us int64
		if err := rs.Scan(&us); err != nil {
			return fmt.Errorf("sqlite: stats: challenges: %w", err)
		}
		lat = append(lat, time.Duration(us)*time.Microsecond)
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("sqlite: stats: challenges: %w", err)
	}
	rules.SetFirstDeliveries(v, lat)
	return nil
}

// ChallengeDriver is the store's challenge enqueue statements, for the
// driver suite (storetest).
func (s *Store) ChallengeDriver() rules.ChallengeDriver { return challenger{enqueuer{s}} }

// TickDriver is the store's challenge tick statements, for the driver
// suite (storetest).
func (s *Store) TickDriver() rules.TickDriver { return ticker{s} }
