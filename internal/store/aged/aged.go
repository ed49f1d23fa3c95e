// Package aged fills a fresh store with the rows a queue keeps after
// months of work: finished messages with their history, attempts,
// delivery evidence, webhook bodies, status events, challenges, pacing and
// daily-recipient slots, opt-outs and replies; and the classes of rows
// that only ever grow: resends, rows flagged maybe_sent, challenges of
// every outcome (superseding ones, fallbacks released), events whose
// endpoint gave up, and replies and statuses about messages sent by
// something else (never attributed, parked for ever). Keys are kept for ever, so a
// production store holds far more finished rows than live ones; scale tests
// and benchmarks put the live work beside them (internal/drain's
// scale_test.go, bench/run's aged workloads).
//
// The rows are written by a few INSERT ... SELECT statements, not through
// the store: a million messages take seconds, not the hours a drain would.
// What they hold follows the store's own writes (internal/store/sqlite and
// internal/store/postgres), so every index a drain or an operator's command
// reads is as full as after real work.
package aged

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Shape is what Postgres and SQLite write.
type Shape struct {
	// Messages is the number of messages; all finished but InFlight.
	Messages int
	// Now is the time the store is filled for: messages were created
	// evenly over the 90 days before it, the newest an hour before it.
	Now time.Time
	// InFlight messages are left for a person: half unknown, half in
	// sending with a lease that expired long ago. A fixed count (not a
	// share), so that what stuck and reconcile must read stays the same
	// at any size.
	InFlight int
	// Identity sends every message (the drain's "sim" in tests). Its
	// daily recipients (daily_recipients) are those of the day before
	// the present (TriedAt, else Now): older ones would have been dropped
	// by the claims under a daily limit since.
	Identity string
	// Endpoint, when set, has every message's sent and delivered events,
	// delivered long ago (the endpoint row itself is the caller's).
	Endpoint string
	// TriedAt is when the webhook processor last tried the statuses and
	// replies that match nothing (about messages some other system sent;
	// one in 50 rows each): each is due again an eighth of its age after
	// it, as after a round then (zero: never tried, all due).
	TriedAt time.Time
}

// Span is how far back the messages go.
const Span = 90 * 24 * time.Hour

func (sh Shape) valid() error {
	if sh.Messages <= 0 || sh.InFlight < 0 || sh.InFlight > sh.Messages || sh.Now.IsZero() || sh.Identity == "" {
		return fmt.Errorf("aged: bad shape %+v", sh)
	}
	return nil
}

// stepMicros is the time between two messages' creation.
func (sh Shape) stepMicros() int64 { return int64(Span/time.Microsecond) / int64(sh.Messages) }

// triedMicros is TriedAt in µs, 0 when zero.
func (sh Shape) triedMicros() int64 {
	if sh.TriedAt.IsZero() {
		return 0
	}
	return sh.TriedAt.UnixMicro()
}

// dailySinceMicros is when the daily recipients' window starts, in µs:
// a day before the present (TriedAt when set, else Now).
func (sh Shape) dailySinceMicros() int64 {
	present := sh.Now
	if !sh.TriedAt.IsZero() {
		present = sh.TriedAt
	}
	return present.Add(-24 * time.Hour).UnixMicro()
}

// startMicros is when the first message was created.
func (sh Shape) startMicros() int64 { return sh.Now.Add(-time.Hour - Span).UnixMicro() }

// Postgres fills schema (migrated, empty) over conn, in one transaction,
// and analyzes the tables it filled, as autovacuum would have by now.
func Postgres(ctx context.Context, conn *pgx.Conn, schema string, sh Shape) error {
	if err := sh.valid(); err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("aged: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("aged: %w", err)
	}
	// $1 messages, $2 first creation (µs), $3 step (µs), $4 in flight,
	// $5 identity, $6 endpoint, $7 tried (µs): the first statement keeps them as columns
	// of aged_src for the others, which take no parameters (PostgreSQL
	// refuses one it cannot type). g runs from 1 (a bigint: g * 7919
	// passes the range of an integer past 271,000 rows); k is a scrambled
	// per-mille that decides a message's fate.
	stmts := []string{
		`CREATE TEMP TABLE aged_src ON COMMIT DROP AS
		SELECT g, (g * 7919) % 1000 AS k,
			to_timestamp(($2::bigint + g * $3::bigint) / 1e6) AS created,
			CASE WHEN g <= $4::int / 2 THEN 'unknown' WHEN g <= $4::int THEN 'sending'
				WHEN (g * 7919) % 1000 < 50 THEN 'failed' WHEN (g * 7919) % 1000 < 100 THEN 'sent'
				WHEN (g * 7919) % 1000 < 850 THEN 'delivered' ELSE 'read' END AS state,
			$5::text AS identity, $6::text AS endpoint, to_timestamp($7::bigint / 1e6) AS tried
		FROM generate_series(1, $1::bigint) g`,
		`INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
			payload, state, reason, attempts, next_attempt_at, lease_owner, lease_until, provider_id, last_error,
			created_at, updated_at, resend_of, maybe_sent)
		SELECT '00' || lpad(g::text, 24, '0'), 'default', 'aged-' || g, md5(g::text), '+1444' || lpad((g % 200000)::text, 7, '0'),
			'whatsapp', identity, 'order', 'ref-' || g, CASE WHEN k % 10 = 0 THEN 'reply' ELSE 'bulk' END,
			'{"template":"order_update","lang":"en","params":["Ada","' || g || '"]}',
			state, CASE state WHEN 'failed' THEN 'permanent' ELSE '' END, 1, created,
			CASE state WHEN 'sending' THEN 'aged-drain' ELSE '' END,
			CASE state WHEN 'sending' THEN created + interval '5 minutes' END,
			CASE WHEN state IN ('sent', 'delivered', 'read') THEN 'aged.' || g ELSE '' END,
			CASE state WHEN 'failed' THEN '{"error":{"message":"(#131026) Message undeliverable","code":131026}}' ELSE '' END,
			created, created + interval '1 minute',
			CASE WHEN g % 100 = 3 THEN '00' || lpad((g - 1)::text, 24, '0') ELSE '' END, g % 200 = 5
		FROM aged_src`,
		`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
		SELECT '00' || lpad(g::text, 24, '0'), 1, '', 'queued', '', 'enqueue', true, 'send', '', created FROM aged_src
		UNION ALL
		SELECT '00' || lpad(g::text, 24, '0'), 2, 'queued', 'sending', '', 'claim', true, 'drain', 'lease aged-drain', created + interval '1 second' FROM aged_src
		UNION ALL
		SELECT '00' || lpad(g::text, 24, '0'), 3, 'sending', CASE state WHEN 'failed' THEN 'failed' WHEN 'unknown' THEN 'unknown' ELSE 'sent' END,
			CASE state WHEN 'failed' THEN 'permanent' ELSE '' END,
			CASE state WHEN 'failed' THEN 'fail(permanent)' WHEN 'unknown' THEN 'ambiguous' ELSE 'accept' END,
			true, 'drain', '', created + interval '2 seconds' FROM aged_src WHERE state <> 'sending'
		UNION ALL
		SELECT '00' || lpad(g::text, 24, '0'), 4, 'sent', 'delivered', '', 'evidence(delivered)', true, 'webhook', '', created + interval '5 seconds'
		FROM aged_src WHERE state IN ('delivered', 'read')
		UNION ALL
		SELECT '00' || lpad(g::text, 24, '0'), 5, 'delivered', 'read', '', 'evidence(read)', true, 'webhook', '', created + interval '1 minute'
		FROM aged_src WHERE state = 'read'`,
		`INSERT INTO attempts (message_id, number, started_at, finished_at, class, http_status, provider_code, raw_error, latency_us)
		SELECT '00' || lpad(g::text, 24, '0'), 1, created + interval '1 second', created + interval '1.2 seconds',
			CASE state WHEN 'failed' THEN 'permanent' WHEN 'unknown' THEN 'ambiguous' ELSE 'accepted' END,
			CASE state WHEN 'failed' THEN 400 WHEN 'unknown' THEN 0 ELSE 200 END,
			CASE state WHEN 'failed' THEN '131026' ELSE '' END, '', 200000
		FROM aged_src WHERE state <> 'sending' ORDER BY g`,
		`INSERT INTO webhook_events (id, provider, identity, headers, body, received_at, processed_at)
		SELECT '00' || lpad(g::text, 24, '0'), 'whatsapp', identity, '{}', convert_to('{"entry":[{"changes":[{"value":{"statuses":[{"id":"aged.' || g || '","status":"delivered"}]}}]}]}', 'UTF8'),
			created + interval '5 seconds', created + interval '6 seconds'
		FROM aged_src WHERE state IN ('delivered', 'read')`,
		`INSERT INTO evidence (id, event_id, provider, identity, dedupe_key, provider_id, status, at, message_id, outcome, received_at, applied_at)
		SELECT '00' || lpad(g::text, 24, '0'), '00' || lpad(g::text, 24, '0'), 'whatsapp', identity, 'aged.' || g || ':delivered', 'aged.' || g,
			'delivered', created + interval '5 seconds', '00' || lpad(g::text, 24, '0'), 'applied',
			created + interval '5 seconds', created + interval '6 seconds'
		FROM aged_src WHERE state IN ('delivered', 'read')`,
		`INSERT INTO inbound (id, event_id, provider, identity, provider_message_id, sender, type, text, context_id, message_id, received_at, stored_at)
		SELECT '00' || lpad(g::text, 24, '0'), '00' || lpad(g::text, 24, '0'), 'whatsapp', identity, 'aged.in.' || g, '+1444' || lpad((g % 200000)::text, 7, '0'),
			'text', 'Thanks!', 'aged.' || g, '00' || lpad(g::text, 24, '0'), created + interval '2 minutes', created + interval '2 minutes'
		FROM aged_src WHERE g % 20 = 0 AND state IN ('delivered', 'read')`,
		`INSERT INTO inbound (id, event_id, provider, identity, provider_message_id, sender, type, text, context_id, message_id, received_at, stored_at,
			retry_at)
		SELECT '01' || lpad(g::text, 24, '0'), '01' || lpad(g::text, 24, '0'), 'whatsapp', identity, 'elsewhere.in.' || g, '+1444' || lpad((g % 200000)::text, 7, '0'),
			'text', 'Hello?', 'elsewhere.' || g, NULL, created + interval '2 minutes', created + interval '2 minutes',
			CASE WHEN tried > 'epoch' THEN tried + (tried - (created + interval '2 minutes')) / 8 ELSE '-infinity' END
		FROM aged_src WHERE g % 50 = 25`,
		`INSERT INTO evidence (id, event_id, provider, identity, dedupe_key, provider_id, status, at, message_id, outcome, received_at, retry_at)
		SELECT '01' || lpad(g::text, 24, '0'), '01' || lpad(g::text, 24, '0'), 'whatsapp', identity, 'elsewhere.' || g || ':delivered', 'elsewhere.' || g,
			'delivered', created + interval '5 seconds', '', '', created + interval '5 seconds',
			CASE WHEN tried > 'epoch' THEN tried + (tried - (created + interval '5 seconds')) / 8 ELSE '-infinity' END
		FROM aged_src WHERE g % 50 = 30`,
		`INSERT INTO challenges (id, tenant, key, body_hash, deadline, accept_duplicate_risk, fallback_undelivered, supersedes, outcome, by_step, why,
			created_at, updated_at)
		SELECT 'ch_aged_' || g, 'default', 'aged-challenge-' || g, md5(g::text), created + interval '10 minutes', false, false,
			CASE WHEN g / 20 % 10 = 5 THEN 'ch_aged_' || (g - 20) ELSE '' END,
			(ARRAY['completed', 'completed', 'expired', 'failed'])[(g / 20 % 4)::int + 1], (ARRAY[1, 2, 0, 0])[(g / 20 % 4)::int + 1],
			(ARRAY['step 1 sent', 'step 2 sent', 'deadline passed', 'every step failed'])[(g / 20 % 4)::int + 1],
			created, created + interval '2 seconds'
		FROM aged_src WHERE g % 20 = 10 AND state IN ('sent', 'delivered', 'read')`,
		`INSERT INTO challenge_steps (challenge_id, step, message_id, release_at, released, seen_state)
		SELECT 'ch_aged_' || g, 1, '00' || lpad(g::text, 24, '0'), created, true, state
		FROM aged_src WHERE g % 20 = 10 AND state IN ('sent', 'delivered', 'read')
		UNION ALL
		SELECT 'ch_aged_' || s.g, 2, '00' || lpad((s.g + 1)::text, 24, '0'), s.created + interval '1 minute', true, n.state
		FROM aged_src s JOIN aged_src n ON n.g = s.g + 1
		WHERE s.g % 20 = 10 AND s.state IN ('sent', 'delivered', 'read') AND s.g / 20 % 4 IN (1, 2)`,
		`INSERT INTO recipient_pace (identity, recipient, next_at)
		SELECT identity, '+1444' || lpad((g % 200000)::text, 7, '0'), max(created) FROM aged_src GROUP BY 1, 2`,
		`INSERT INTO daily_recipients (identity, recipient, last_at)
		SELECT identity, '+1444' || lpad((g % 200000)::text, 7, '0'), max(created) FROM aged_src
		WHERE created > to_timestamp(` + fmt.Sprint(sh.dailySinceMicros()) + ` / 1e6) GROUP BY 1, 2`,
		`INSERT INTO daily_counts (identity, recipients) SELECT identity, count(*) FROM daily_recipients GROUP BY identity`,
		`INSERT INTO opt_outs (identity, recipient, opted_out, source, changed_at, recorded_at)
		SELECT identity, '+1444' || lpad((g % 200000)::text, 7, '0'), true, 'inbound STOP', max(created), max(created)
		FROM aged_src WHERE g % 100 = 7 GROUP BY 1, 2`,
		`INSERT INTO events (endpoint_id, tenant, subject, message_id, type, payload, created_at, next_at, attempts, delivered_at, dead_at)
		SELECT endpoint, 'default', '00' || lpad(g::text, 24, '0'), '00' || lpad(g::text, 24, '0'), 'message.' || s.st, '{}',
			created + s.off, created + s.off, 1, CASE WHEN NOT s.dead THEN created + s.off + interval '1 second' END,
			CASE WHEN s.dead THEN created + s.off + interval '3 days' END
		FROM aged_src, LATERAL (VALUES ('sent', interval '2 seconds', false),
			('delivered', interval '5 seconds', g % 100 = 50)) AS s(st, off, dead)
		WHERE endpoint <> '' AND state IN ('delivered', 'read')`,
	}
	args := []any{sh.Messages, sh.startMicros(), sh.stepMicros(), sh.InFlight, sh.Identity, sh.Endpoint, sh.triedMicros()}
	for _, q := range stmts {
		// Each statement takes only the parameters it names.
		if _, err := tx.Exec(ctx, q, argsFor(q, "$", args)...); err != nil {
			return fmt.Errorf("aged: %w\n%s", err, q)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("aged: %w", err)
	}
	for _, t := range []string{"messages", "history", "attempts", "webhook_events", "evidence", "inbound", "challenges",
		"challenge_steps", "recipient_pace", "daily_recipients", "opt_outs", "events"} {
		if _, err := conn.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, t}.Sanitize()); err != nil {
			return fmt.Errorf("aged: %w", err)
		}
	}
	return nil
}

// argsFor is the prefix of args up to the highest numbered parameter
// (mark "$" or "?") that q uses: both drivers count a statement's
// parameters up to its highest number and refuse more arguments.
func argsFor(q, mark string, args []any) []any {
	last := 0
	for i := 1; i <= len(args); i++ {
		if containsParam(q, mark, i) {
			last = i
		}
	}
	return args[:last]
}

func containsParam(q, mark string, n int) bool {
	p := fmt.Sprintf("%s%d", mark, n)
	for i := 0; i+len(p) <= len(q); i++ {
		if q[i:i+len(p)] == p && (i+len(p) == len(q) || q[i+len(p)] < '0' || q[i+len(p)] > '9') {
			return true
		}
	}
	return false
}

// SQLite fills the store at db (migrated, empty; db a handle of its own on
// the store's file) in one transaction, as Postgres does.
func SQLite(ctx context.Context, db *sql.DB, sh Shape) error {
	if err := sh.valid(); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("aged: %w", err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) error {
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("aged: %w\n%s", err, q)
		}
		return nil
	}
	if err := exec("BEGIN IMMEDIATE"); err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	const sec = int64(time.Second / time.Microsecond)
	// ?1 messages, ?2 first creation (µs), ?3 step (µs), ?4 in flight,
	// ?5 identity, ?6 endpoint, ?7 a second in µs, ?8 tried (µs).
	args := []any{sh.Messages, sh.startMicros(), sh.stepMicros(), sh.InFlight, sh.Identity, sh.Endpoint, sec, sh.triedMicros()}
	src := `WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < ?1),
	aged_src AS (SELECT g, (g * 7919) % 1000 AS k, ?2 + g * ?3 AS created,
		CASE WHEN g <= ?4 / 2 THEN 'unknown' WHEN g <= ?4 THEN 'sending'
			WHEN (g * 7919) % 1000 < 50 THEN 'failed' WHEN (g * 7919) % 1000 < 100 THEN 'sent'
			WHEN (g * 7919) % 1000 < 850 THEN 'delivered' ELSE 'read' END AS state FROM seq)`
	id := `'00' || printf('%024d', g)`
	id1 := `'01' || printf('%024d', g)` // rows about no message of the queue
	rcpt := `'+1444' || printf('%07d', g % 200000)`
	stmts := []string{
		`CREATE TEMP TABLE aged_src AS ` + src + ` SELECT g, k, created, state FROM aged_src`,
		`INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
			payload, state, reason, attempts, next_attempt_at, lease_owner, lease_until, provider_id, last_error,
			created_at, updated_at, maybe_sent, resend_of)
		SELECT ` + id + `, 'default', 'aged-' || g, printf('%032x', g), ` + rcpt + `,
			'whatsapp', ?5, 'order', 'ref-' || g, CASE WHEN k % 10 = 0 THEN 'reply' ELSE 'bulk' END,
			'{"template":"order_update","lang":"en","params":["Ada","' || g || '"]}',
			state, CASE state WHEN 'failed' THEN 'permanent' ELSE '' END, 1, created,
			CASE state WHEN 'sending' THEN 'aged-drain' ELSE '' END,
			CASE state WHEN 'sending' THEN created + 300 * ?7 END,
			CASE WHEN state IN ('sent', 'delivered', 'read') THEN 'aged.' || g ELSE '' END,
			CASE state WHEN 'failed' THEN '{"error":{"message":"(#131026) Message undeliverable","code":131026}}' ELSE '' END,
			created, created + 60 * ?7, g % 200 = 5, CASE WHEN g % 100 = 3 THEN '00' || printf('%024d', g - 1) ELSE '' END
		FROM temp.aged_src`,
		`INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
		SELECT ` + id + `, 1, '', 'queued', '', 'enqueue', 1, 'send', '', created FROM temp.aged_src
		UNION ALL
		SELECT ` + id + `, 2, 'queued', 'sending', '', 'claim', 1, 'drain', 'lease aged-drain', created + ?7 FROM temp.aged_src
		UNION ALL
		SELECT ` + id + `, 3, 'sending', CASE state WHEN 'failed' THEN 'failed' WHEN 'unknown' THEN 'unknown' ELSE 'sent' END,
			CASE state WHEN 'failed' THEN 'permanent' ELSE '' END,
			CASE state WHEN 'failed' THEN 'fail(permanent)' WHEN 'unknown' THEN 'ambiguous' ELSE 'accept' END,
			1, 'drain', '', created + 2 * ?7 FROM temp.aged_src WHERE state <> 'sending'
		UNION ALL
		SELECT ` + id + `, 4, 'sent', 'delivered', '', 'evidence(delivered)', 1, 'webhook', '', created + 5 * ?7
		FROM temp.aged_src WHERE state IN ('delivered', 'read')
		UNION ALL
		SELECT ` + id + `, 5, 'delivered', 'read', '', 'evidence(read)', 1, 'webhook', '', created + 60 * ?7
		FROM temp.aged_src WHERE state = 'read'`,
		`INSERT INTO attempts (message_id, number, started_at, finished_at, class, http_status, provider_code, raw_error, latency_us)
		SELECT ` + id + `, 1, created + ?7, created + ?7 + ?7 / 5,
			CASE state WHEN 'failed' THEN 'permanent' WHEN 'unknown' THEN 'ambiguous' ELSE 'accepted' END,
			CASE state WHEN 'failed' THEN 400 WHEN 'unknown' THEN 0 ELSE 200 END,
			CASE state WHEN 'failed' THEN '131026' ELSE '' END, '', ?7 / 5
		FROM temp.aged_src WHERE state <> 'sending' ORDER BY g`,
		`INSERT INTO webhook_events (id, provider, identity, headers, body, received_at, processed_at)
		SELECT ` + id + `, 'whatsapp', ?5, '{}', CAST('{"entry":[{"changes":[{"value":{"statuses":[{"id":"aged.' || g || '","status":"delivered"}]}}]}]}' AS BLOB),
			created + 5 * ?7, created + 6 * ?7
		FROM temp.aged_src WHERE state IN ('delivered', 'read')`,
		`INSERT INTO evidence (id, event_id, provider, identity, dedupe_key, provider_id, status, at, message_id, outcome, received_at, applied_at)
		SELECT ` + id + `, ` + id + `, 'whatsapp', ?5, 'aged.' || g || ':delivered', 'aged.' || g,
			'delivered', created + 5 * ?7, ` + id + `, 'applied', created + 5 * ?7, created + 6 * ?7
		FROM temp.aged_src WHERE state IN ('delivered', 'read')`,
		`INSERT INTO inbound (id, event_id, provider, identity, provider_message_id, sender, type, text, context_id, message_id, received_at, stored_at)
		SELECT ` + id + `, ` + id + `, 'whatsapp', ?5, 'aged.in.' || g, ` + rcpt + `,
			'text', 'Thanks!', 'aged.' || g, ` + id + `, created + 120 * ?7, created + 120 * ?7
		FROM temp.aged_src WHERE g % 20 = 0 AND state IN ('delivered', 'read')`,
		`INSERT INTO inbound (id, event_id, provider, identity, provider_message_id, sender, type, text, context_id, message_id, received_at, stored_at,
			retry_at)
		SELECT ` + id1 + `, ` + id1 + `, 'whatsapp', ?5, 'elsewhere.in.' || g, ` + rcpt + `,
			'text', 'Hello?', 'elsewhere.' || g, NULL, created + 120 * ?7, created + 120 * ?7,
			CASE WHEN ?8 > 0 THEN ?8 + (?8 - (created + 120 * ?7)) / 8 ELSE 0 END
		FROM temp.aged_src WHERE g % 50 = 25`,
		`INSERT INTO evidence (id, event_id, provider, identity, dedupe_key, provider_id, status, at, message_id, outcome, received_at, retry_at)
		SELECT ` + id1 + `, ` + id1 + `, 'whatsapp', ?5, 'elsewhere.' || g || ':delivered', 'elsewhere.' || g,
			'delivered', created + 5 * ?7, '', '', created + 5 * ?7,
			CASE WHEN ?8 > 0 THEN ?8 + (?8 - (created + 5 * ?7)) / 8 ELSE 0 END
		FROM temp.aged_src WHERE g % 50 = 30`,
		`INSERT INTO challenges (id, tenant, key, body_hash, deadline, accept_duplicate_risk, fallback_undelivered, supersedes, outcome, by_step, why,
			created_at, updated_at)
		SELECT 'ch_aged_' || g, 'default', 'aged-challenge-' || g, printf('%032x', g), created + 600 * ?7, 0, 0,
			CASE WHEN g / 20 % 10 = 5 THEN 'ch_aged_' || (g - 20) ELSE '' END,
			CASE g / 20 % 4 WHEN 0 THEN 'completed' WHEN 1 THEN 'completed' WHEN 2 THEN 'expired' ELSE 'failed' END,
			CASE g / 20 % 4 WHEN 0 THEN 1 WHEN 1 THEN 2 ELSE 0 END,
			CASE g / 20 % 4 WHEN 0 THEN 'step 1 sent' WHEN 1 THEN 'step 2 sent' WHEN 2 THEN 'deadline passed' ELSE 'every step failed' END,
			created, created + 2 * ?7
		FROM temp.aged_src WHERE g % 20 = 10 AND state IN ('sent', 'delivered', 'read')`,
		`INSERT INTO challenge_steps (challenge_id, step, message_id, release_at, released, seen_state)
		SELECT 'ch_aged_' || g, 1, ` + id + `, created, 1, state
		FROM temp.aged_src WHERE g % 20 = 10 AND state IN ('sent', 'delivered', 'read')
		UNION ALL
		SELECT 'ch_aged_' || s.g, 2, '00' || printf('%024d', s.g + 1), s.created + 60 * ?7, 1, n.state
		FROM temp.aged_src s JOIN temp.aged_src n ON n.g = s.g + 1
		WHERE s.g % 20 = 10 AND s.state IN ('sent', 'delivered', 'read') AND s.g / 20 % 4 IN (1, 2)`,
		`INSERT INTO recipient_pace (identity, recipient, next_at)
		SELECT ?5, ` + rcpt + `, max(created) FROM temp.aged_src GROUP BY 2`,
		`INSERT INTO daily_recipients (identity, recipient, last_at)
		SELECT ?5, ` + rcpt + `, max(created) FROM temp.aged_src
		WHERE created > ` + fmt.Sprint(sh.dailySinceMicros()) + ` GROUP BY 2`,
		`INSERT INTO opt_outs (identity, recipient, opted_out, source, changed_at, recorded_at)
		SELECT ?5, ` + rcpt + `, 1, 'inbound STOP', max(created), max(created)
		FROM temp.aged_src WHERE g % 100 = 7 GROUP BY 2`,
		`INSERT INTO events (endpoint_id, tenant, subject, message_id, type, payload, created_at, next_at, attempts, delivered_at, dead_at)
		SELECT ?6, 'default', ` + id + `, ` + id + `, 'message.' || s.st, '{}', created + s.off * ?7, created + s.off * ?7, 1,
			CASE WHEN s.st = 'sent' OR g % 100 <> 50 THEN created + (s.off + 1) * ?7 END,
			CASE WHEN s.st = 'delivered' AND g % 100 = 50 THEN created + (s.off + 3 * 86400) * ?7 END
		FROM temp.aged_src, (SELECT 'sent' AS st, 2 AS off UNION ALL SELECT 'delivered', 5) AS s
		WHERE ?6 <> '' AND state IN ('delivered', 'read')`,
		`DROP TABLE temp.aged_src`,
	}
	for _, q := range stmts {
		if err := exec(q, argsFor(q, "?", args)...); err != nil {
			return err
		}
	}
	if err := exec("COMMIT"); err != nil {
		return err
	}
	ok = true
	return exec("PRAGMA wal_checkpoint(TRUNCATE)")
}
