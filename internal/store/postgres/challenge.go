package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// pgQ is what reads a challenge: the pool or a transaction.
type pgQ interface {
	Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, q string, args ...any) pgx.Row
}

const challengeCols = `id, tenant, key, body_hash, deadline, accept_duplicate_risk, fallback_undelivered, supersedes,
	outcome, by_step, blocked_step, why, next_at, created_at, updated_at`

// loadChallenge reads the challenge matching where (nil, nil when none)
// with its steps' rows; lock is appended to the challenge's SELECT.
func loadChallenge(ctx context.Context, q pgQ, where, lock string, args ...any) (*store.Challenge, error) {
	var c store.Challenge
	var deadline, next *time.Time
	err := q.QueryRow(ctx, "SELECT "+challengeCols+" FROM challenges WHERE "+where+lock, args...).Scan(&c.ID, &c.Tenant, &c.Key,
		&c.BodyHash, &deadline, &c.AcceptDuplicateRisk, &c.FallbackUndelivered, &c.Supersedes, &c.Outcome, &c.By, &c.Blocked,
		&c.Why, &next, &c.CreatedAt, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: challenge: %w", err)
	}
	c.Deadline, c.NextAt = utcPtr(deadline), utcPtr(next)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	rs, err := q.Query(ctx, "SELECT "+prefixed("m.", messageCols)+", cs.step, cs.release_at, cs.released, cs.why FROM challenge_steps cs "+
		"JOIN messages m ON m.id = cs.message_id WHERE cs.challenge_id = $1 ORDER BY cs.step", c.ID)
	if err != nil {
		return nil, fmt.Errorf("postgres: challenge steps: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var st store.ChallengeStep
		m, err := scanMessage(withExtra(rs, &st.Step, &st.ReleaseAt, &st.Released, &st.Why))
		if err != nil {
			return nil, fmt.Errorf("postgres: challenge steps: %w", err)
		}
		st.ReleaseAt, st.Message = st.ReleaseAt.UTC(), *m
		c.Steps = append(c.Steps, st)
	}
	return &c, rs.Err()
}

// ChallengeGet finds a challenge by its key, or by one of its steps.
func (s *Store) ChallengeGet(ctx context.Context, tenant, ref string) (*store.Challenge, error) {
	if tenant == "" {
		tenant = store.DefaultTenant
	}
	c, err := loadChallenge(ctx, s.pool, "tenant = $1 AND key = $2", "", tenant, ref)
	if err == nil && c == nil {
		c, err = loadChallenge(ctx, s.pool, "id = (SELECT cs.challenge_id FROM challenge_steps cs JOIN messages m ON m.id = cs.message_id "+
			"WHERE m.tenant = $1 AND (m.id = $2 OR m.key = $2) LIMIT 1)", "", tenant, ref)
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
	return c.s.inTx(ctx, "challenge enqueue", func(tx pgx.Tx) error { return fn(challengeTx{tx}) })
}

// challengeTx is a challenge enqueue's transaction as rules.ChallengeTx.
type challengeTx struct{ tx pgx.Tx }

func (t challengeTx) ChallengeInsert(ctx context.Context, c *store.Challenge, now time.Time) (bool, error) {
	tag, err := t.tx.Exec(ctx, "INSERT INTO challenges ("+challengeCols+") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14) "+
		"ON CONFLICT (tenant, key) DO NOTHING",
		c.ID, c.Tenant, c.Key, c.BodyHash, c.Deadline, c.AcceptDuplicateRisk, c.FallbackUndelivered, c.Supersedes,
		c.Outcome, c.By, c.Blocked, c.Why, c.NextAt, now)
	if err != nil {
		return false, fmt.Errorf("postgres: challenge enqueue: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (t challengeTx) ChallengeByKey(ctx context.Context, tenant, key string, lock bool) (*store.Challenge, error) {
	forUpdate := ""
	if lock {
		forUpdate = " FOR UPDATE"
	}
	return loadChallenge(ctx, t.tx, "tenant = $1 AND key = $2", forUpdate, tenant, key)
}

func (t challengeTx) StepCancel(ctx context.Context, x rules.StepCancel, now time.Time) (bool, error) {
	return cancelStep(ctx, t.tx, x, store.SourceSend, now)
}

func (t challengeTx) StepWhy(ctx context.Context, challengeID string, step int, why string) error {
	if _, err := t.tx.Exec(ctx, "UPDATE challenge_steps SET why = $1 WHERE challenge_id = $2 AND step = $3", why, challengeID, step); err != nil {
		return fmt.Errorf("postgres: supersede: %w", err)
	}
	return nil
}

func (t challengeTx) ChallengeSupersede(ctx context.Context, id, why string, now time.Time) error {
	if _, err := t.tx.Exec(ctx, "UPDATE challenges SET outcome = $1, why = $2, next_at = NULL, updated_at = $3 WHERE id = $4 AND outcome = 'open'",
		store.ChallengeSuperseded, why, now, id); err != nil {
		return fmt.Errorf("postgres: supersede: %w", err)
	}
	return nil
}

func (t challengeTx) MessageInsertOne(ctx context.Context, m *store.Message, now time.Time) (bool, error) {
	payload, _ := json.Marshal(m.Payload)
	tag, err := t.tx.Exec(ctx, "INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, purpose, "+
		"trigger_ref, lane, payload, state, next_attempt_at, expires_at, resend_of, created_at, updated_at) "+
		"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16) ON CONFLICT (tenant, key) DO NOTHING",
		m.ID, m.Tenant, m.Key, m.BodyHash, m.To, m.Channel, m.Identity, m.Purpose, m.TriggerRef, m.Lane, string(payload),
		string(m.State), m.NextAttemptAt, m.ExpiresAt, m.ResendOf, now)
	if err != nil {
		return false, fmt.Errorf("postgres: challenge enqueue: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (t challengeTx) MessageIDByKey(ctx context.Context, tenant, key string) (string, error) {
	var id string
	if err := t.tx.QueryRow(ctx, "SELECT id FROM messages WHERE tenant = $1 AND key = $2", tenant, key).Scan(&id); err != nil {
		return "", fmt.Errorf("postgres: challenge enqueue: %w", err)
	}
	return id, nil
}

func (t challengeTx) StepInsert(ctx context.Context, id string, st store.ChallengeStep, m *store.Message) error {
	if _, err := t.tx.Exec(ctx, "INSERT INTO challenge_steps (challenge_id, step, message_id, release_at, released, why, seen_state) "+
		"VALUES ($1, $2, $3, $4, $5, $6, $7)", id, st.Step, m.ID, st.ReleaseAt, st.Released, st.Why, string(m.State)); err != nil {
		return fmt.Errorf("postgres: challenge enqueue: %w", err)
	}
	return nil
}

func (t challengeTx) CreationHistory(ctx context.Context, ms []*store.Message, now time.Time) error {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return writeEnqueueHistory(ctx, t.tx, ids, now)
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

func (t ticker) TickClock(ctx context.Context, at time.Time) (time.Time, error) {
	return t.s.at(ctx, t.s.pool, at)
}

func (t ticker) ChallengesDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rs, err := t.s.pool.Query(ctx, "SELECT id FROM challenges c WHERE outcome = 'open' AND ((next_at IS NOT NULL AND next_at <= $1) "+
		"OR EXISTS (SELECT 1 FROM challenge_steps cs JOIN messages m ON m.id = cs.message_id WHERE cs.challenge_id = c.id AND m.state <> cs.seen_state)) "+
		"ORDER BY next_at LIMIT $2", now, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: challenge tick: %w", err)
	}
	ids, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: challenge tick: %w", err)
	}
	return ids, nil
}

func (t ticker) TickTx(ctx context.Context, fn func(rules.TickTx) error) error {
	return t.s.inTx(ctx, "challenge tick", func(tx pgx.Tx) error { return fn(tickTx{t.s, tx}) })
}

// tickTx is one challenge's tick as rules.TickTx.
type tickTx struct {
	s  *Store
	tx pgx.Tx
}

func (t tickTx) Now(ctx context.Context, at time.Time) (time.Time, error) {
	return t.s.at(ctx, t.tx, at)
}

// ChallengeOpen skips a challenge another tick holds (SKIP LOCKED): that
// tick decides it.
func (t tickTx) ChallengeOpen(ctx context.Context, id string) (*store.Challenge, error) {
	return loadChallenge(ctx, t.tx, "id = $1 AND outcome = 'open'", " FOR UPDATE SKIP LOCKED", id)
}

func (t tickTx) StepCancel(ctx context.Context, x rules.StepCancel, source string, now time.Time) (bool, error) {
	return cancelStep(ctx, t.tx, x, source, now)
}

func (t tickTx) StepRelease(ctx context.Context, challengeID string, step int, messageID string, now time.Time) (bool, error) {
	tag, err := t.tx.Exec(ctx, "UPDATE messages SET next_attempt_at = $1, updated_at = $1 WHERE id = $2 AND state = 'queued'", now, messageID)
	if err != nil {
		return false, fmt.Errorf("postgres: challenge release: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return false, nil
	}
	if _, err := t.tx.Exec(ctx, "UPDATE challenge_steps SET released = true WHERE challenge_id = $1 AND step = $2", challengeID, step); err != nil {
		return false, fmt.Errorf("postgres: challenge release: %w", err)
	}
	if _, err := t.tx.Exec(ctx, notifySQL); err != nil {
		return false, fmt.Errorf("postgres: challenge release notify: %w", err)
	}
	return true, nil
}

func (t tickTx) StepWhy(ctx context.Context, challengeID string, step int, why string) error {
	if _, err := t.tx.Exec(ctx, "UPDATE challenge_steps SET why = $1 WHERE challenge_id = $2 AND step = $3", why, challengeID, step); err != nil {
		return fmt.Errorf("postgres: challenge tick: %w", err)
	}
	return nil
}

func (t tickTx) StepsSeen(ctx context.Context, challengeID string) error {
	if _, err := t.tx.Exec(ctx, "UPDATE challenge_steps cs SET seen_state = m.state FROM messages m WHERE m.id = cs.message_id AND cs.challenge_id = $1", challengeID); err != nil {
		return fmt.Errorf("postgres: challenge tick: %w", err)
	}
	return nil
}

func (t tickTx) ChallengeUpdate(ctx context.Context, id string, plan rules.TickPlan, now time.Time) error {
	if _, err := t.tx.Exec(ctx, "UPDATE challenges SET outcome = $1, by_step = $2, blocked_step = $3, why = $4, next_at = $5, updated_at = $6 WHERE id = $7",
		plan.Outcome, plan.By, plan.Blocked, plan.Why, plan.NextAt, now, id); err != nil {
		return fmt.Errorf("postgres: challenge tick: %w", err)
	}
	return nil
}

// cancelStep cancels a step that has not gone out, through the machine's
// cancel, with x.Detail in its history; false when the row is no longer
// queued.
func cancelStep(ctx context.Context, tx pgx.Tx, x rules.StepCancel, source string, now time.Time) (bool, error) {
	res := rules.ChallengeCancel()
	tag, err := tx.Exec(ctx, "UPDATE messages SET state = $1, reason = $2, updated_at = $3 WHERE id = $4 AND state = 'queued'",
		string(res.To), string(res.Reason), now, x.ID)
	if err != nil {
		return false, fmt.Errorf("postgres: challenge cancel: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return false, nil
	}
	if _, err := tx.Exec(ctx, "INSERT INTO history (message_id, from_state, to_state, reason, event, applied, source, detail, at, seq) "+
		"SELECT $1, $2, $3, $4, $5, true, $6, $7, $8, coalesce(max(seq), 0) + 1 FROM history WHERE message_id = $1",
		x.ID, string(state.Queued), string(res.To), string(res.Reason), rules.ChallengeCancelEvent, source, x.Detail, now); err != nil {
		return false, fmt.Errorf("postgres: challenge cancel history: %w", err)
	}
	return true, nil
}

// challengeVitals reads store.ChallengeVitals in Stats' read transaction
// (the recent figures from since).
func challengeVitals(ctx context.Context, tx pgx.Tx, now, since time.Time, v *store.ChallengeVitals) error {
	// Open challenges from their partial index; those that ended, the
	// superseding sends and the fallbacks fired are running counts
	// (rules.SetCounters), for ended challenges only ever grow.
	rs, err := tx.Query(ctx, "SELECT blocked_step > 0, count(*)::int FROM challenges WHERE outcome = 'open' GROUP BY 1")
	if err != nil {
		return fmt.Errorf("postgres: stats: challenges: %w", err)
	}
	for rs.Next() {
		var n int
		var blocked bool
		if err := rs.Scan(&blocked, &n); err != nil {
			rs.Close()
			return fmt.Errorf("postgres: stats: challenges: %w", err)
		}
		v.Add("open", 0, blocked, n)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("postgres: stats: challenges: %w", err)
	}
	for _, q := range []struct {
		sql  string
		args []any
		dst  *int
	}{
		// Unknown rows (messages_in_flight) that are challenge steps.
		{"SELECT count(*)::int FROM messages m WHERE m.state IN ('sending', 'unknown') AND m.state = 'unknown' " +
			"AND m.expires_at IS NOT NULL AND m.expires_at <= $1 AND EXISTS (SELECT 1 FROM challenge_steps cs WHERE cs.message_id = m.id)",
			[]any{now}, &v.UnknownPastDeadline},
		// challenges_expired.
		{"SELECT count(*)::int FROM challenges WHERE outcome = 'expired' AND deadline >= $1 AND deadline <= $2",
			[]any{since, now}, &v.RecentExpired},
	} {
		if err := tx.QueryRow(ctx, q.sql, q.args...).Scan(q.dst); err != nil {
			return fmt.Errorf("postgres: stats: challenges: %w", err)
		}
	}
	// Creation to first delivery: the challenges one of whose steps got
	// delivered evidence within the window (history_delivered, then the
	// unique message_id of challenge_steps), each measured to its first
	// delivered evidence of any step, which must itself be in the window.
	// The challenges are found from the window's deliveries, each step by
	// its message id (LATERAL, then ARRAY: one plan whatever the
	// estimates, never a join against every challenge step).
	rs, err = tx.Query(ctx, "SELECT (extract(epoch FROM first - created_at) * 1000000)::bigint FROM (SELECT c.created_at, "+
		"(SELECT min(h.at) FROM challenge_steps s JOIN history h ON h.message_id = s.message_id "+
		"WHERE s.challenge_id = c.id AND h.to_state = 'delivered' AND h.applied) AS first FROM challenges c "+
		"WHERE c.id = ANY(ARRAY(SELECT cs.challenge_id FROM history h "+
		"CROSS JOIN LATERAL (SELECT s.challenge_id FROM challenge_steps s WHERE s.message_id = h.message_id OFFSET 0) cs "+
		"WHERE h.to_state = 'delivered' AND h.applied AND h.at >= $1))) f WHERE first >= $1 ORDER BY first DESC LIMIT $2",
		since, store.LatencySample)
	if err != nil {
		return fmt.Errorf("postgres: stats: challenges: %w", err)
	}
	defer rs.Close()
	var lat []time.Duration
	for rs.Next() {
		var us int64
		if err := rs.Scan(&us); err != nil {
			return fmt.Errorf("postgres: stats: challenges: %w", err)
		}
		lat = append(lat, time.Duration(us)*time.Microsecond)
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("postgres: stats: challenges: %w", err)
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
