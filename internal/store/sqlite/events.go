package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/msgq/msgq/internal/store"
)

// EndpointAdd registers an endpoint.
func (s *Store) EndpointAdd(ctx context.Context, e *store.Endpoint) error {
	if err := e.Validate(); err != nil {
		return err
	}
	now := s.clock()
	if _, err := s.w.ExecContext(ctx, "INSERT INTO endpoints (id, tenant, url, secret, created_at) VALUES (?, ?, ?, ?, ?)",
		e.ID, e.Tenant, e.URL, e.Secret, micros(now)); err != nil {
		return fmt.Errorf("sqlite: add endpoint: %w", err)
	}
	e.CreatedAt = now
	return nil
}

const endpointStatusSQL = `SELECT p.id, p.tenant, p.url, p.secret, p.created_at, p.disabled_at, p.consecutive_failures, p.last_error,
    p.last_success_at, p.last_failure_at,
    (SELECT count(*) FROM events e WHERE e.endpoint_id = p.id AND e.delivered_at IS NULL AND e.dead_at IS NULL),
    (SELECT count(*) FROM events e WHERE e.endpoint_id = p.id AND e.dead_at IS NOT NULL),
    (SELECT count(*) FROM events e WHERE e.endpoint_id = p.id AND e.delivered_at IS NOT NULL),
    (SELECT min(created_at) FROM events e WHERE e.endpoint_id = p.id AND e.delivered_at IS NULL AND e.dead_at IS NULL)
FROM endpoints p WHERE (? = '' OR p.tenant = ?) ORDER BY p.tenant, p.created_at, p.id`

// EndpointList returns the endpoints of tenant ("" for all) with their backlog.
func (s *Store) EndpointList(ctx context.Context, tenant string) ([]store.EndpointStatus, error) {
	rs, err := s.r.QueryContext(ctx, endpointStatusSQL, tenant, tenant)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list endpoints: %w", err)
	}
	defer rs.Close()
	var out []store.EndpointStatus
	for rs.Next() {
		var e store.EndpointStatus
		var created int64
		var disabled, success, failure, oldest sql.NullInt64
		if err := rs.Scan(&e.ID, &e.Tenant, &e.URL, &e.Secret, &created, &disabled, &e.ConsecutiveFailures, &e.LastError,
			&success, &failure, &e.Pending, &e.Dead, &e.Delivered, &oldest); err != nil {
			return nil, fmt.Errorf("sqlite: list endpoints: %w", err)
		}
		e.CreatedAt = fromMicros(created)
		e.DisabledAt, e.LastSuccessAt, e.LastFailureAt, e.OldestPendingAt =
			fromNullMicros(disabled), fromNullMicros(success), fromNullMicros(failure), fromNullMicros(oldest)
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list endpoints: %w", err)
	}
	return out, nil
}

// EndpointRemove deletes an endpoint and its undelivered events.
func (s *Store) EndpointRemove(ctx context.Context, id string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: remove endpoint: %w", err)
	}
	defer tx.Rollback()
	r, err := tx.ExecContext(ctx, "DELETE FROM endpoints WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("sqlite: remove endpoint: %w", err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: endpoint %s", store.ErrNotFound, id)
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM events WHERE endpoint_id = ?", id); err != nil {
		return fmt.Errorf("sqlite: remove endpoint: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: remove endpoint: %w", err)
	}
	return nil
}

// EndpointRetry puts an endpoint's dead events back to pending.
func (s *Store) EndpointRetry(ctx context.Context, id string) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retry endpoint: %w", err)
	}
	defer tx.Rollback()
	var one int
	if err := tx.QueryRowContext(ctx, "SELECT 1 FROM endpoints WHERE id = ?", id).Scan(&one); err != nil {
		if err == sql.ErrNoRows {
			return 0, fmt.Errorf("%w: endpoint %s", store.ErrNotFound, id)
		}
		return 0, fmt.Errorf("sqlite: retry endpoint: %w", err)
	}
	r, err := tx.ExecContext(ctx, "UPDATE events SET dead_at = NULL, attempts = 0, next_at = ? WHERE endpoint_id = ? AND dead_at IS NOT NULL",
		micros(s.clock()), id)
	if err != nil {
		return 0, fmt.Errorf("sqlite: retry endpoint: %w", err)
	}
	n, _ := r.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sqlite: retry endpoint: %w", err)
	}
	return int(n), nil
}

const eventCols = `e.seq, e.id, e.endpoint_id, e.tenant, e.subject, e.message_id, e.challenge_id, e.type, e.payload, e.created_at,
    e.attempts, e.next_at, e.lease_owner, e.lease_until, e.delivered_at, e.dead_at, e.last_error`

func scanEvent(sc interface{ Scan(...any) error }, e *store.Event, extra ...any) error {
	var created, next int64
	var lease, delivered, dead sql.NullInt64
	dst := append([]any{&e.Seq, &e.ID, &e.EndpointID, &e.Tenant, &e.Subject, &e.MessageID, &e.ChallengeID, &e.Type, &e.Data, &created,
		&e.Attempts, &next, &e.LeaseOwner, &lease, &delivered, &dead, &e.LastError}, extra...)
	if err := sc.Scan(dst...); err != nil {
		return err
	}
	e.CreatedAt, e.NextAt = fromMicros(created), fromMicros(next)
	e.LeaseUntil, e.DeliveredAt, e.DeadAt = fromNullMicros(lease), fromNullMicros(delivered), fromNullMicros(dead)
	return nil
}

// claimEventsSQL takes the due heads of each endpoint's subjects: an
// event with an earlier undelivered, not dead one of its subject waits.
const claimEventsSQL = `UPDATE events SET lease_owner = ?1, lease_until = ?2, attempts = attempts + 1
WHERE seq IN (
    SELECT e.seq FROM events e
    WHERE e.delivered_at IS NULL AND e.dead_at IS NULL AND e.next_at <= ?3
      AND (e.lease_until IS NULL OR e.lease_until <= ?3)
      AND NOT EXISTS (SELECT 1 FROM events o WHERE o.endpoint_id = e.endpoint_id AND o.subject = e.subject
                      AND o.seq < e.seq AND o.delivered_at IS NULL AND o.dead_at IS NULL)
    ORDER BY e.next_at, e.seq LIMIT ?4)
RETURNING seq`

// EventClaim leases due events.
func (s *Store) EventClaim(ctx context.Context, p *store.EventClaimParams) ([]store.EventDelivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now := p.Now.UTC().Truncate(store.Resolution)
	if p.Now.IsZero() {
		now = s.clock()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim events: %w", err)
	}
	defer tx.Rollback()
	rs, err := tx.QueryContext(ctx, claimEventsSQL, p.Owner, micros(now.Add(p.LeaseFor)), micros(now), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim events: %w", err)
	}
	var seqs []int64
	for rs.Next() {
		var n int64
		if err := rs.Scan(&n); err != nil {
			rs.Close()
			return nil, fmt.Errorf("sqlite: claim events: %w", err)
		}
		seqs = append(seqs, n)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: claim events: %w", err)
	}
	out := make([]store.EventDelivery, 0, len(seqs))
	for _, n := range seqs {
		var d store.EventDelivery
		row := tx.QueryRowContext(ctx, "SELECT "+eventCols+", p.url, p.secret FROM events e JOIN endpoints p ON p.id = e.endpoint_id WHERE e.seq = ?", n)
		if err := scanEvent(row, &d.Event, &d.URL, &d.Secret); err != nil {
			return nil, fmt.Errorf("sqlite: claim events: %w", err)
		}
		out = append(out, d)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: claim events: %w", err)
	}
	return out, nil
}

// EventRecord records one delivery's outcome.
func (s *Store) EventRecord(ctx context.Context, p *store.EventOutcome) error {
	now := p.Now.UTC().Truncate(store.Resolution)
	if p.Now.IsZero() {
		now = s.clock()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: record event: %w", err)
	}
	defer tx.Rollback()
	var r sql.Result
	if p.Delivered {
		r, err = tx.ExecContext(ctx, "UPDATE events SET delivered_at = ?, lease_owner = '', lease_until = NULL, last_error = '' "+
			"WHERE seq = ? AND delivered_at IS NULL", micros(now), p.Seq)
		if err == nil {
			_, err = tx.ExecContext(ctx, "UPDATE endpoints SET consecutive_failures = 0, last_success_at = ? WHERE id = ?", micros(now), p.EndpointID)
		}
	} else {
		var dead any
		if p.Dead {
			dead = micros(now)
		}
		r, err = tx.ExecContext(ctx, "UPDATE events SET next_at = ?, dead_at = ?, last_error = ?, lease_owner = '', lease_until = NULL "+
			"WHERE seq = ? AND lease_owner = ? AND delivered_at IS NULL", micros(p.NextAt), dead, p.Error, p.Seq, p.Owner)
		if err == nil {
			_, err = tx.ExecContext(ctx, "UPDATE endpoints SET consecutive_failures = consecutive_failures + 1, last_error = ?, last_failure_at = ? WHERE id = ?",
				p.Error, micros(now), p.EndpointID)
		}
	}
	if err != nil {
		return fmt.Errorf("sqlite: record event: %w", err)
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: event %d is no longer leased to %s", store.ErrStale, p.Seq, p.Owner)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: record event: %w", err)
	}
	return nil
}

// EventList returns an endpoint's events, oldest first.
func (s *Store) EventList(ctx context.Context, endpointID string, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.r.QueryContext(ctx, "SELECT "+eventCols+" FROM events e WHERE (? = '' OR e.endpoint_id = ?) ORDER BY e.seq LIMIT ?",
		endpointID, endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list events: %w", err)
	}
	defer rs.Close()
	var out []store.Event
	for rs.Next() {
		var e store.Event
		if err := scanEvent(rs, &e); err != nil {
			return nil, fmt.Errorf("sqlite: list events: %w", err)
		}
		out = append(out, e)
	}
	return out, rs.Err()
}

// EventBacklog counts undelivered events.
func (s *Store) EventBacklog(ctx context.Context) (*store.EventBacklog, error) {
	var b store.EventBacklog
	var oldest sql.NullInt64
	// The pending ones from events_due (the outbox's backlog); the dead
	// ones, kept until purged or retried, from their running count (0024).
	err := s.r.QueryRowContext(ctx, "SELECT "+
		"(SELECT count(*) FROM events INDEXED BY events_due WHERE delivered_at IS NULL AND dead_at IS NULL), "+
		"coalesce((SELECT n FROM counters WHERE name = ?), 0), "+
		"(SELECT min(created_at) FROM events INDEXED BY events_due WHERE delivered_at IS NULL AND dead_at IS NULL)",
		store.CounterDeadEvents).Scan(&b.Pending, &b.Dead, &oldest)
	if err != nil {
		return nil, fmt.Errorf("sqlite: event backlog: %w", err)
	}
	b.OldestPendingAt = fromNullMicros(oldest)
	return &b, nil
}

// EventPurge deletes finished events written before p.Before.
func (s *Store) EventPurge(ctx context.Context, p *store.PurgeParams) (int, error) {
	where := "(delivered_at IS NOT NULL OR dead_at IS NOT NULL) AND created_at < ? AND (? = '' OR tenant = ?) " +
		"AND (? = '' OR message_id IN (SELECT id FROM messages WHERE purpose = ?))"
	args := []any{micros(p.Before), p.Tenant, p.Tenant, p.Purpose, p.Purpose}
	var n int
	if p.DryRun {
		if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM events WHERE "+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("sqlite: purge events: %w", err)
		}
		return n, nil
	}
	r, err := s.w.ExecContext(ctx, "DELETE FROM events WHERE "+where, args...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: purge events: %w", err)
	}
	m, _ := r.RowsAffected()
	return int(m), nil
}
