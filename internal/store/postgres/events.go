package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/msgq/msgq/internal/store"
)

// EndpointAdd registers an endpoint.
func (s *Store) EndpointAdd(ctx context.Context, e *store.Endpoint) error {
	if err := e.Validate(); err != nil {
		return err
	}
	now, err := s.clock(ctx, s.pool)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO endpoints (id, tenant, url, secret, created_at) VALUES ($1, $2, $3, $4, $5)",
		e.ID, e.Tenant, e.URL, e.Secret, now); err != nil {
		return fmt.Errorf("postgres: add endpoint: %w", err)
	}
	e.CreatedAt = now
	return nil
}

const endpointStatusSQL = `SELECT p.id, p.tenant, p.url, p.secret, p.created_at, p.disabled_at, p.consecutive_failures, p.last_error,
    p.last_success_at, p.last_failure_at,
    (SELECT count(*)::int FROM events e WHERE e.endpoint_id = p.id AND e.delivered_at IS NULL AND e.dead_at IS NULL),
    (SELECT count(*)::int FROM events e WHERE e.endpoint_id = p.id AND e.dead_at IS NOT NULL),
    (SELECT count(*)::int FROM events e WHERE e.endpoint_id = p.id AND e.delivered_at IS NOT NULL),
    (SELECT min(created_at) FROM events e WHERE e.endpoint_id = p.id AND e.delivered_at IS NULL AND e.dead_at IS NULL)
FROM endpoints p WHERE ($1 = '' OR p.tenant = $1) ORDER BY p.tenant, p.created_at, p.id`

func tsPtr(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// EndpointList returns the endpoints of tenant ("" for all) with their backlog.
func (s *Store) EndpointList(ctx context.Context, tenant string) ([]store.EndpointStatus, error) {
	rs, err := s.pool.Query(ctx, endpointStatusSQL, tenant)
	if err != nil {
		return nil, fmt.Errorf("postgres: list endpoints: %w", err)
	}
	defer rs.Close()
	var out []store.EndpointStatus
	for rs.Next() {
		var e store.EndpointStatus
		var disabled, success, failure, oldest pgtype.Timestamptz
		if err := rs.Scan(&e.ID, &e.Tenant, &e.URL, &e.Secret, &e.CreatedAt, &disabled, &e.ConsecutiveFailures, &e.LastError,
			&success, &failure, &e.Pending, &e.Dead, &e.Delivered, &oldest); err != nil {
			return nil, fmt.Errorf("postgres: list endpoints: %w", err)
		}
		e.CreatedAt = e.CreatedAt.UTC()
		e.DisabledAt, e.LastSuccessAt, e.LastFailureAt, e.OldestPendingAt = tsPtr(disabled), tsPtr(success), tsPtr(failure), tsPtr(oldest)
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list endpoints: %w", err)
	}
	return out, nil
}

// EndpointRemove deletes an endpoint and its undelivered events.
func (s *Store) EndpointRemove(ctx context.Context, id string) error {
	var n int
	err := s.pool.QueryRow(ctx, `WITH d AS (DELETE FROM endpoints WHERE id = $1 RETURNING id),
    e AS (DELETE FROM events WHERE endpoint_id IN (SELECT id FROM d))
SELECT count(*)::int FROM d`, id).Scan(&n)
	if err != nil {
		return fmt.Errorf("postgres: remove endpoint: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: endpoint %s", store.ErrNotFound, id)
	}
	return nil
}

// EndpointRetry puts an endpoint's dead events back to pending.
func (s *Store) EndpointRetry(ctx context.Context, id string) (int, error) {
	now, err := s.clock(ctx, s.pool)
	if err != nil {
		return 0, err
	}
	var found bool
	var n int
	err = s.pool.QueryRow(ctx, `WITH u AS (UPDATE events SET dead_at = NULL, attempts = 0, next_at = $2
    WHERE endpoint_id = $1 AND dead_at IS NOT NULL RETURNING 1)
SELECT EXISTS (SELECT 1 FROM endpoints WHERE id = $1), (SELECT count(*)::int FROM u)`, id, now).Scan(&found, &n)
	if err != nil {
		return 0, fmt.Errorf("postgres: retry endpoint: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("%w: endpoint %s", store.ErrNotFound, id)
	}
	return n, nil
}

const eventCols = `e.seq, e.id, e.endpoint_id, e.tenant, e.subject, e.message_id, e.challenge_id, e.type, e.payload, e.created_at,
    e.attempts, e.next_at, e.lease_owner, e.lease_until, e.delivered_at, e.dead_at, e.last_error`

func scanEvent(sc interface{ Scan(...any) error }, e *store.Event, extra ...any) error {
	var lease, delivered, dead pgtype.Timestamptz
	dst := append([]any{&e.Seq, &e.ID, &e.EndpointID, &e.Tenant, &e.Subject, &e.MessageID, &e.ChallengeID, &e.Type, &e.Data, &e.CreatedAt,
		&e.Attempts, &e.NextAt, &e.LeaseOwner, &lease, &delivered, &dead, &e.LastError}, extra...)
	if err := sc.Scan(dst...); err != nil {
		return err
	}
	e.CreatedAt, e.NextAt = e.CreatedAt.UTC(), e.NextAt.UTC()
	e.LeaseUntil, e.DeliveredAt, e.DeadAt = tsPtr(lease), tsPtr(delivered), tsPtr(dead)
	return nil
}

// claimEventsSQL takes the due heads of each endpoint's subjects (an
// event with an earlier undelivered, not dead one of its subject waits),
// skipping rows another claim holds locked. A claim that committed in the
// meantime is seen by the recheck of lease_until on the locked row.
const claimEventsSQL = `WITH c AS (
    SELECT e.seq FROM events e
    WHERE e.delivered_at IS NULL AND e.dead_at IS NULL AND e.next_at <= $3
      AND (e.lease_until IS NULL OR e.lease_until <= $3)
      AND NOT EXISTS (SELECT 1 FROM events o WHERE o.endpoint_id = e.endpoint_id AND o.subject = e.subject
                      AND o.seq < e.seq AND o.delivered_at IS NULL AND o.dead_at IS NULL)
    ORDER BY e.next_at, e.seq LIMIT $4
    FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE events e SET lease_owner = $1, lease_until = $2, attempts = e.attempts + 1
    FROM c WHERE e.seq = c.seq
    RETURNING ` + eventCols + `
)
SELECT u.*, p.url, p.secret FROM u JOIN endpoints p ON p.id = u.endpoint_id ORDER BY u.seq`

// EventClaim leases due events.
func (s *Store) EventClaim(ctx context.Context, p *store.EventClaimParams) ([]store.EventDelivery, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	now, err := s.at(ctx, s.pool, p.Now)
	if err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, claimEventsSQL, p.Owner, now.Add(p.LeaseFor), now, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim events: %w", err)
	}
	defer rs.Close()
	var out []store.EventDelivery
	for rs.Next() {
		var d store.EventDelivery
		if err := scanEvent(rs, &d.Event, &d.URL, &d.Secret); err != nil {
			return nil, fmt.Errorf("postgres: claim events: %w", err)
		}
		out = append(out, d)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claim events: %w", err)
	}
	return out, nil
}

// EventRecord records one delivery's outcome.
func (s *Store) EventRecord(ctx context.Context, p *store.EventOutcome) error {
	now, err := s.at(ctx, s.pool, p.Now)
	if err != nil {
		return err
	}
	var n int
	if p.Delivered {
		err = s.pool.QueryRow(ctx, `WITH u AS (UPDATE events SET delivered_at = $1, lease_owner = '', lease_until = NULL, last_error = ''
    WHERE seq = $2 AND delivered_at IS NULL RETURNING endpoint_id),
  p AS (UPDATE endpoints SET consecutive_failures = 0, last_success_at = $1 WHERE id IN (SELECT endpoint_id FROM u))
SELECT count(*)::int FROM u`, now, p.Seq).Scan(&n)
	} else {
		dead := pgtype.Timestamptz{Time: now, Valid: p.Dead}
		err = s.pool.QueryRow(ctx, `WITH u AS (UPDATE events SET next_at = $1, dead_at = $2, last_error = $3, lease_owner = '', lease_until = NULL
    WHERE seq = $4 AND lease_owner = $5 AND delivered_at IS NULL RETURNING endpoint_id),
  p AS (UPDATE endpoints SET consecutive_failures = consecutive_failures + 1, last_error = $3, last_failure_at = $6
    WHERE id IN (SELECT endpoint_id FROM u))
SELECT count(*)::int FROM u`, p.NextAt, dead, p.Error, p.Seq, p.Owner, now).Scan(&n)
	}
	if err != nil {
		return fmt.Errorf("postgres: record event: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: event %d is no longer leased to %s", store.ErrStale, p.Seq, p.Owner)
	}
	return nil
}

// EventList returns an endpoint's events, oldest first.
func (s *Store) EventList(ctx context.Context, endpointID string, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.pool.Query(ctx, "SELECT "+eventCols+" FROM events e WHERE ($1 = '' OR e.endpoint_id = $1) ORDER BY e.seq LIMIT $2",
		endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list events: %w", err)
	}
	defer rs.Close()
	var out []store.Event
	for rs.Next() {
		var e store.Event
		if err := scanEvent(rs, &e); err != nil {
			return nil, fmt.Errorf("postgres: list events: %w", err)
		}
		out = append(out, e)
	}
	return out, rs.Err()
}

// EventBacklog counts undelivered events: the pending ones from events_due
// (the outbox's backlog), the dead ones from their running count (0024:
// kept until purged or retried, they only grow between purges).
func (s *Store) EventBacklog(ctx context.Context) (*store.EventBacklog, error) {
	var b store.EventBacklog
	var oldest pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `SELECT
    (SELECT count(*)::int FROM events WHERE delivered_at IS NULL AND dead_at IS NULL),
    (SELECT coalesce(sum(n), 0)::int FROM (SELECT n FROM counters WHERE name = $1 UNION ALL SELECT n FROM counter_deltas WHERE name = $1) c),
    (SELECT min(created_at) FROM events WHERE delivered_at IS NULL AND dead_at IS NULL)`, store.CounterDeadEvents).Scan(&b.Pending, &b.Dead, &oldest)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: event backlog: %w", err)
	}
	b.OldestPendingAt = tsPtr(oldest)
	return &b, nil
}

// EventPurge deletes finished events written before p.Before.
func (s *Store) EventPurge(ctx context.Context, p *store.PurgeParams) (int, error) {
	where := "(delivered_at IS NOT NULL OR dead_at IS NOT NULL) AND created_at < $1 AND ($2 = '' OR tenant = $2) " +
		"AND ($3 = '' OR message_id IN (SELECT id FROM messages WHERE purpose = $3))"
	q := "WITH d AS (DELETE FROM events WHERE " + where + " RETURNING 1) SELECT count(*)::int FROM d"
	if p.DryRun {
		q = "SELECT count(*)::int FROM events WHERE " + where
	}
	var n int
	if err := s.pool.QueryRow(ctx, q, p.Before, p.Tenant, p.Purpose).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: purge events: %w", err)
	}
	return n, nil
}
