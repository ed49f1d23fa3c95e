package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// webhookChunk is the number of events one multi-row INSERT carries: a
// webhook server's group commit is usually smaller than insertChunk, and
// a cached statement of this size covers most of it; the remainder goes
// row by row through a cached one-row statement, so no call prepares a
// statement of its own odd size.
const webhookChunk = 32

const webhookCols = `id, provider, identity, headers, body, received_at, processed_at, error, dedupe_key`

const webhookInsertColN = 7

// insertWebhooksSQL stores n events, skipping each whose dedupe key its
// provider and identity have already (webhook_events_dedupe, a partial
// unique index: the conflict target repeats its predicate), and returns
// the ids of those it wrote. Only that index's conflict is skipped: any
// other (an id twice) is an error, never a delivery silently dropped.
func insertWebhooksSQL(n int) string {
	return "INSERT INTO webhook_events (id, provider, identity, headers, body, received_at, dedupe_key) VALUES " +
		placeholders(n, webhookInsertColN) +
		" ON CONFLICT (provider, identity, dedupe_key) WHERE dedupe_key <> '' DO NOTHING RETURNING id"
}

// WebhookStore keeps raw events in one durable transaction; an event
// whose dedupe key is stored already is skipped and counted (see
// store.Evidence).
func (s *Store) WebhookStore(ctx context.Context, evs []store.WebhookEvent) error {
	if len(evs) == 0 {
		return nil
	}
	now := s.clock()
	ids := make([]string, len(evs))
	recv := make([]time.Time, len(evs))
	rows := make([][]any, len(evs))
	for i := range evs {
		ev := &evs[i]
		ids[i] = s.ids.New(now)
		recv[i] = now
		if !ev.ReceivedAt.IsZero() {
			recv[i] = ev.ReceivedAt.UTC().Truncate(store.Resolution)
		}
		headers, err := rules.Headers(ev.Headers)
		if err != nil {
			return fmt.Errorf("sqlite: store webhook: %w", err)
		}
		body := ev.Body
		if body == nil {
			body = []byte{} // the column is NOT NULL: an empty body is still a delivery
		}
		rows[i] = []any{ids[i], ev.Provider, ev.Identity, headers, body, micros(recv[i]), ev.DedupeKey}
	}
	// Both statements are prepared once per store, before the transaction
	// takes the single writer connection.
	one, many := insertWebhooksSQL(1), insertWebhooksSQL(webhookChunk)
	for _, q := range []string{one, many} {
		if _, err := s.stmt(ctx, q); err != nil {
			return fmt.Errorf("sqlite: store webhook: %w", err)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: store webhook: %w", err)
	}
	defer tx.Rollback()
	written := make(map[string]bool, len(evs))
	insert := func(st *sql.Stmt, args []any) error {
		rs, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				return err
			}
			written[id] = true
		}
		return rs.Err()
	}
	i := 0
	if len(rows) >= webhookChunk {
		st, err := s.txStmt(ctx, tx, many)
		if err != nil {
			return fmt.Errorf("sqlite: store webhook: %w", err)
		}
		for ; i+webhookChunk <= len(rows); i += webhookChunk {
			args := make([]any, 0, webhookChunk*webhookInsertColN)
			for _, r := range rows[i : i+webhookChunk] {
				args = append(args, r...)
			}
			if err := insert(st, args); err != nil {
				return fmt.Errorf("sqlite: store webhook: %w", err)
			}
		}
	}
	if i < len(rows) {
		st, err := s.txStmt(ctx, tx, one)
		if err != nil {
			return fmt.Errorf("sqlite: store webhook: %w", err)
		}
		for ; i < len(rows); i++ {
			if err := insert(st, rows[i]); err != nil {
				return fmt.Errorf("sqlite: store webhook: %w", err)
			}
		}
	}
	var replays, items int64
	for i := range evs {
		if !written[ids[i]] {
			replays, items = replays+1, items+int64(evs[i].Items)
		}
	}
	// Counted with the skip, in its transaction: only when there were
	// replays, so that ordinary deliveries never touch the counter rows.
	for _, c := range []struct {
		name string
		n    int64
	}{{store.CounterReplayedWebhooks, replays}, {store.CounterDuplicateWebhooks, items}} {
		if c.n == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, countDuplicatesSQL, c.name, c.n); err != nil {
			return fmt.Errorf("sqlite: store webhook: count replays: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: store webhook: commit: %w", err)
	}
	// Only once durable: a failed call leaves the caller's events as they were.
	for i := range evs {
		if !written[ids[i]] {
			evs[i].ID, evs[i].Replayed = "", true
			continue
		}
		evs[i].ID, evs[i].ReceivedAt, evs[i].Replayed = ids[i], recv[i], false
	}
	return nil
}

func scanWebhook(sc scanner) (*store.WebhookEvent, error) {
	var (
		ev        store.WebhookEvent
		headers   string
		received  int64
		processed sql.NullInt64
	)
	if err := sc.Scan(&ev.ID, &ev.Provider, &ev.Identity, &headers, &ev.Body, &received, &processed, &ev.Error, &ev.DedupeKey); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(headers), &ev.Headers); err != nil {
		return nil, fmt.Errorf("webhook %s: headers: %w", ev.ID, err)
	}
	ev.ReceivedAt, ev.ProcessedAt = fromMicros(received), fromNullMicros(processed)
	return &ev, nil
}

// WebhookPending returns unprocessed events, oldest first.
func (s *Store) WebhookPending(ctx context.Context, limit int) ([]store.WebhookEvent, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.r.QueryContext(ctx, "SELECT "+webhookCols+" FROM webhook_events INDEXED BY webhook_events_pending "+
		"WHERE processed_at IS NULL ORDER BY received_at, id LIMIT ?", limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: pending webhooks: %w", err)
	}
	defer rs.Close()
	out := []store.WebhookEvent{}
	for rs.Next() {
		ev, err := scanWebhook(rs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: pending webhooks: %w", err)
		}
		out = append(out, *ev)
	}
	return out, rs.Err()
}

// WebhookGet returns one stored event.
func (s *Store) WebhookGet(ctx context.Context, id string) (*store.WebhookEvent, error) {
	ev, err := scanWebhook(s.r.QueryRowContext(ctx, "SELECT "+webhookCols+" FROM webhook_events WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get webhook: %w", err)
	}
	return ev, nil
}

// WebhookUnreadable returns events processed with an error or skipped
// items, oldest first, along webhook_events_unreadable (the statement
// repeats its predicate, as SQLite uses a partial index only then).
func (s *Store) WebhookUnreadable(ctx context.Context, limit int) ([]store.WebhookEvent, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.r.QueryContext(ctx, "SELECT "+webhookCols+" FROM webhook_events INDEXED BY webhook_events_unreadable "+
		"WHERE error <> '' ORDER BY received_at, id LIMIT ?", limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: unreadable webhooks: %w", err)
	}
	defer rs.Close()
	out := []store.WebhookEvent{}
	for rs.Next() {
		ev, err := scanWebhook(rs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: unreadable webhooks: %w", err)
		}
		out = append(out, *ev)
	}
	return out, rs.Err()
}

// WebhookRetry puts an unreadable event back to pending, in one
// statement; only when it changes nothing does it read the event, to say
// why.
func (s *Store) WebhookRetry(ctx context.Context, id string) error {
	r, err := s.w.ExecContext(ctx, "UPDATE webhook_events SET processed_at = NULL, error = '' WHERE id = ? AND error <> ''", id)
	if err != nil {
		return fmt.Errorf("sqlite: retry webhook: %w", err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlite: retry webhook: %w", err)
	}
	if n == 1 {
		return nil
	}
	var processed bool
	err = s.r.QueryRowContext(ctx, "SELECT processed_at IS NOT NULL FROM webhook_events WHERE id = ?", id).Scan(&processed)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("sqlite: retry webhook: %w", err)
	}
	return rules.RetryRefused(id, processed)
}

const (
	insertEvidenceSQL = `INSERT INTO evidence (id, event_id, provider, identity, dedupe_key, provider_id, status, at,
	callback_ref, error_code, error, received_at, recipient, suspect, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (provider, identity, dedupe_key) DO NOTHING`
	insertInboundSQL = `INSERT INTO inbound (id, event_id, provider, identity, provider_message_id, sender, type, text,
	reply_id, reply_title, context_id, message_id, received_at, stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (provider, identity, provider_message_id) DO NOTHING`
	// An item the unique index refused: which row has its key, and from
	// which event (a row this event wrote before is a reread).
	evidenceByKeySQL = `SELECT id, event_id FROM evidence WHERE provider = ? AND identity = ? AND dedupe_key = ?`
	inboundByKeySQL  = `SELECT id, event_id FROM inbound WHERE provider = ? AND identity = ? AND provider_message_id = ?`
	// replyToSQL finds the row a reply answers: the one row of the
	// reply's identity with its context as provider id (none when two
	// share it: a collision is for a person), sent to the one who wrote
	// (when the reply names them). The literal provider_id <> '' lets
	// SQLite use the partial index messages_identity_provider_id.
	replyToSQL = `SELECT CASE WHEN count(*) = 1 THEN min(id) END FROM messages
	WHERE identity = ? AND provider_id = ? AND provider_id <> '' AND (? = '' OR recipient = ?)`
	windowSQL = `INSERT INTO service_windows (identity, recipient, last_inbound_at) VALUES (?, ?, ?)
	ON CONFLICT (identity, recipient) DO UPDATE SET last_inbound_at = max(last_inbound_at, excluded.last_inbound_at)`
	countDuplicatesSQL = `INSERT INTO counters (name, n) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET n = n + excluded.n`
	// releaseHeldSQL makes the rows held for a closed window due now. Its
	// predicate repeats messages_window_held's literally (SQLite uses a
	// partial index only then), and INDEXED BY turns any drift between
	// the two into an error instead of a walk of messages. The
	// next_attempt_at term leaves rows already due untouched.
	releaseHeldSQL = `UPDATE messages INDEXED BY messages_window_held SET next_attempt_at = ?
	WHERE state = 'queued' AND last_error = '` + store.WindowHeld + `' AND identity = ? AND recipient = ? AND next_attempt_at > ?`
)

// WebhookIngest writes what processing read from stored events in one
// transaction. The unique indexes decide what is new (ON CONFLICT DO
// NOTHING), also between items of one call.
func (s *Store) WebhookIngest(ctx context.Context, ps []store.IngestParams) (*store.IngestResult, error) {
	res := &store.IngestResult{}
	if len(ps) == 0 {
		return res, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ingest: %w", err)
	}
	defer tx.Rollback()
	ts := newTxStmts(tx)
	defer ts.close()
	now := s.clock()

	events, err := readEvents(ctx, tx, ps)
	if err != nil {
		return nil, err
	}
	fresh := map[string]bool{} // ids of the rows this call wrote
	for _, e := range rules.Ingest(ps, events, now) {
		if e.Write {
			if err := s.ingestOne(ctx, ts, &e, now, fresh, res); err != nil {
				return nil, err
			}
		}
		if e.Ev == nil {
			continue
		}
		r, err := ts.exec(ctx, "UPDATE webhook_events SET processed_at = ?, error = ? WHERE id = ? AND processed_at IS NULL",
			micros(now), e.Mark, e.P.EventID)
		if err != nil {
			return nil, fmt.Errorf("sqlite: ingest: mark processed: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 1 {
			res.Events++
		}
	}
	if res.Duplicates > 0 {
		if _, err := ts.exec(ctx, countDuplicatesSQL, store.CounterDuplicateWebhooks, res.Duplicates); err != nil {
			return nil, fmt.Errorf("sqlite: ingest: count duplicates: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: ingest: commit: %w", err)
	}
	return res, nil
}

func readEvents(ctx context.Context, tx *sql.Tx, ps []store.IngestParams) (map[string]*store.IngestedEvent, error) {
	out := make(map[string]*store.IngestedEvent, len(ps))
	const chunk = 500
	for start := 0; start < len(ps); start += chunk {
		part := ps[start:min(start+chunk, len(ps))]
		args := make([]any, len(part))
		for i := range part {
			args[i] = part[i].EventID
		}
		rs, err := tx.QueryContext(ctx, "SELECT id, provider, identity, received_at, processed_at IS NOT NULL FROM webhook_events WHERE id IN ("+
			strings.TrimSuffix(strings.Repeat("?,", len(part)), ",")+")", args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: ingest: read events: %w", err)
		}
		for rs.Next() {
			var id string
			var received int64
			ev := &store.IngestedEvent{}
			if err := rs.Scan(&id, &ev.Provider, &ev.Identity, &received, &ev.Processed); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: ingest: read events: %w", err)
			}
			ev.ReceivedAt = fromMicros(received)
			out[id] = ev
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: ingest: read events: %w", err)
		}
	}
	return out, nil
}

// ingestOne writes one event's statuses, notices and inbound messages
// (prepared by rules.Ingest), counting into res and adding the ids of the
// rows it writes to fresh. IDs and store-set times are filled in place
// for the new ones.
func (s *Store) ingestOne(ctx context.Context, ts *txStmts, e *rules.IngestEvent, now time.Time,
	fresh map[string]bool, res *store.IngestResult) error {
	p := e.P
	for j := range p.Statuses {
		st := &p.Statuses[j]
		id := s.ids.New(now)
		outcome := ""
		if st.Suspect != "" {
			outcome = store.EvidenceSuspect
		}
		r, err := ts.exec(ctx, insertEvidenceSQL, id, st.EventID, st.Provider, st.Identity, st.DedupeKey, st.ProviderID,
			string(st.Status), micros(st.At.UTC()), st.CallbackRef, st.ErrorCode, st.Error, micros(st.ReceivedAt),
			st.Recipient, st.Suspect, outcome)
		if err != nil {
			return fmt.Errorf("sqlite: ingest status: %w", err)
		}
		if n, _ := r.RowsAffected(); n == 1 {
			st.ID = id
			fresh[id] = true
			res.Statuses++
			continue
		}
		reread, err := rereadOf(ctx, ts, evidenceByKeySQL, st.Provider, st.Identity, st.DedupeKey, p.EventID, fresh)
		if err != nil {
			return fmt.Errorf("sqlite: ingest status: %w", err)
		}
		rules.CountRefusedOne(res, reread)
	}
	if err := s.ingestNotices(ctx, ts, p, e.Ev, micros(now), micros(e.Received), res); err != nil {
		return err
	}
	var news []*store.Inbound
	for j := range p.Inbound {
		in := &p.Inbound[j]
		var msgID sql.NullString
		if in.ContextID != "" {
			row, err := ts.queryRow(ctx, replyToSQL, in.Identity, in.ContextID, in.From, in.From)
			if err != nil {
				return fmt.Errorf("sqlite: ingest inbound: %w", err)
			}
			if err := row.Scan(&msgID); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("sqlite: ingest inbound: %w", err)
			}
		}
		id := s.ids.New(now)
		r, err := ts.exec(ctx, insertInboundSQL, id, in.EventID, in.Provider, in.Identity, in.ProviderMessageID, in.From,
			in.Type, in.Text, in.ReplyID, in.ReplyTitle, in.ContextID, msgID, micros(in.ReceivedAt), micros(now))
		if err != nil {
			return fmt.Errorf("sqlite: ingest inbound: %w", err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			reread, err := rereadOf(ctx, ts, inboundByKeySQL, in.Provider, in.Identity, in.ProviderMessageID, p.EventID, fresh)
			if err != nil {
				return fmt.Errorf("sqlite: ingest inbound: %w", err)
			}
			rules.CountRefusedOne(res, reread)
			continue
		}
		fresh[id] = true
		in.ID, in.StoredAt, in.MessageID = id, now, nil
		if msgID.Valid {
			in.MessageID = &msgID.String
		}
		res.Inbound++
		news = append(news, in)
	}
	for _, w := range rules.Windows(news) {
		if _, err := ts.exec(ctx, windowSQL, w.Identity, w.Recipient, micros(w.At)); err != nil {
			return fmt.Errorf("sqlite: ingest window: %w", err)
		}
		if !w.Release {
			continue
		}
		r, err := ts.exec(ctx, releaseHeldSQL, micros(now), w.Identity, w.Recipient, micros(now))
		if err != nil {
			return fmt.Errorf("sqlite: ingest: release held rows: %w", err)
		}
		n, _ := r.RowsAffected()
		res.Released += int(n)
	}
	return nil
}

// rereadOf says whether the row holding an item's key (q looks it up by
// provider, identity and key) is one an earlier processing of eventID wrote: then
// the item is a reread, not a duplicate. A row this call wrote (fresh) is
// a duplicate within the call (rules.Reread).
func rereadOf(ctx context.Context, ts *txStmts, q, provider, identity, key, eventID string, fresh map[string]bool) (bool, error) {
	row, err := ts.queryRow(ctx, q, provider, identity, key)
	if err != nil {
		return false, err
	}
	var id, evID string
	if err := row.Scan(&id, &evID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, err
	}
	return rules.Reread(evID, eventID, fresh[id]), nil
}

const evidenceCols = `id, event_id, provider, identity, dedupe_key, provider_id, status, at, callback_ref,
	error_code, error, message_id, outcome, received_at, applied_at, recipient, suspect`

func scanEvidence(sc scanner) (*store.StatusEvidence, error) {
	var (
		st           store.StatusEvidence
		status       string
		at, received int64
		applied      sql.NullInt64
	)
	if err := sc.Scan(&st.ID, &st.EventID, &st.Provider, &st.Identity, &st.DedupeKey, &st.ProviderID, &status, &at,
		&st.CallbackRef, &st.ErrorCode, &st.Error, &st.MessageID, &st.Outcome, &received, &applied, &st.Recipient, &st.Suspect); err != nil {
		return nil, err
	}
	st.Status, st.At, st.ReceivedAt, st.AppliedAt = state.State(status), fromMicros(at), fromMicros(received), fromNullMicros(applied)
	return &st, nil
}

// applyCandidatesSQL finds pending statuses that name a row (by provider
// id within their identity, or by callback reference) that no drain holds
// a live lease of, oldest provider timestamp first; applyEvidence decides
// each (store.MatchStatus), which may set it aside as suspect. Parked
// statuses are passed over here rather than after the LIMIT: a backlog of
// statuses no row will ever claim (another system's sends on a shared
// number) must not starve new ones. Only statuses due (?1 at or after
// their retry_at: new ones, and parked ones whose time to be tried again
// has come) are read, the first ?3 (store.DueBatch) along evidence_retry
// (after an upgrade, the whole backlog is due once), so
// that a round never walks that backlog: retryParkedSQL sets the next try
// of what matched nothing.
const applyCandidatesSQL = `SELECT e.id FROM evidence e
WHERE e.id IN (SELECT id FROM evidence INDEXED BY evidence_retry WHERE outcome = '' AND retry_at <= ?1
		ORDER BY retry_at, at, id LIMIT ?3)
	AND ` + matchablePred + `
ORDER BY e.at, e.id LIMIT ?2`

// matchablePred says a status e names a row (by provider id within its
// identity, or by callback reference) that no drain holds a live lease
// of at ?1.
const matchablePred = `(
	(e.provider_id <> '' AND EXISTS (SELECT 1 FROM messages x WHERE x.identity = e.identity AND x.provider_id = e.provider_id
		AND x.provider_id <> '' AND NOT (x.state = 'sending' AND coalesce(x.lease_until, 0) > ?1)))
	OR (e.callback_ref <> '' AND EXISTS (SELECT 1 FROM messages x WHERE x.id = e.callback_ref
		AND NOT (x.state = 'sending' AND coalesce(x.lease_until, 0) > ?1))))`

// attributeCandidatesSQL finds unattributed replies whose context has
// become the provider id of one row of their identity (sent to the one
// who wrote, when the reply names them). Only replies due (?1 at or after
// their retry_at) are read, the first ?2 (store.DueBatch) through
// inbound_retry; retryRepliesSQL sets
// the next try of those still linked to nothing: replies about messages
// some other system sent are never linked, and must not be read again on
// every round.
const attributeCandidatesSQL = `SELECT id, mid FROM (
	SELECT i.id, (SELECT CASE WHEN count(*) = 1 THEN min(m.id) END FROM messages m
		WHERE m.identity = i.identity AND m.provider_id = i.context_id AND m.provider_id <> ''
		AND (i.sender = '' OR m.recipient = i.sender)) AS mid
	FROM inbound i WHERE i.id IN (SELECT id FROM inbound INDEXED BY inbound_retry
		WHERE message_id IS NULL AND context_id <> '' AND retry_at <= ?1 ORDER BY retry_at, id LIMIT ?2)
) WHERE mid IS NOT NULL`

// dueSQL says whether any status or reply is due (?1): a round with none,
// and nothing to apply, writes nothing.
const dueSQL = `SELECT EXISTS (SELECT 1 FROM evidence INDEXED BY evidence_retry WHERE outcome = '' AND retry_at <= ?1)
	OR EXISTS (SELECT 1 FROM inbound INDEXED BY inbound_retry WHERE message_id IS NULL AND context_id <> '' AND retry_at <= ?1)`

// retryParkedSQL and retryRepliesSQL set when the statuses and replies
// due at ?1 that still match nothing (a status: or name a row under a
// live lease) are tried again: after an eighth of their age, so that a
// status that waits for a drain's answer is tried again within moments
// and one parked for a month every few days: what a round reads follows
// what arrives, never what was parked for ever. Those that match stay due
// (a run that stopped at its limit, or found them after its reads, left
// them).
var (
	retryParkedSQL = `UPDATE evidence AS e SET retry_at = ?1 + max(?1 - received_at, 0) / 8
WHERE e.id IN (SELECT id FROM evidence INDEXED BY evidence_retry WHERE outcome = '' AND retry_at <= ?1
		ORDER BY retry_at, at, id LIMIT ?2)
	AND NOT ` + matchablePred
	retryRepliesSQL = `UPDATE inbound AS i SET retry_at = ?1 + max(?1 - stored_at, 0) / 8
WHERE i.id IN (SELECT id FROM inbound INDEXED BY inbound_retry
		WHERE message_id IS NULL AND context_id <> '' AND retry_at <= ?1 ORDER BY retry_at, id LIMIT ?2) AND (SELECT count(*) FROM messages m
	WHERE m.identity = i.identity AND m.provider_id = i.context_id AND m.provider_id <> ''
	AND (i.sender = '' OR m.recipient = i.sender)) <> 1`
)

// EvidenceApply applies pending statuses whose rows are known, in one
// write transaction (SQLite has one writer: one fsync for the batch).
// The candidates are found on a reader first, so that a long walk past
// parked statuses never holds the write lock; each is read again under
// it before it is applied.
func (s *Store) EvidenceApply(ctx context.Context, p *store.ApplyParams) (*store.ApplyResult, error) {
	limit := rules.ApplyLimit(p)
	now := p.Now.UTC().Truncate(store.Resolution)
	if p.Now.IsZero() {
		now = s.clock()
	}
	res := &store.ApplyResult{Applied: []store.AppliedEvidence{}}
	cands, err := s.queryIDs(ctx, s.r, applyCandidatesSQL, micros(now), limit, store.DueBatch)
	if err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	links, err := s.attributeCandidates(ctx, now, store.DueBatch)
	if err != nil {
		return nil, err
	}
	if len(cands) == 0 && len(links) == 0 {
		var due bool
		if err := s.r.QueryRowContext(ctx, dueSQL, micros(now)).Scan(&due); err != nil {
			return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
		}
		if !due {
			if err := s.r.QueryRowContext(ctx, countParkedSQL, store.CounterParkedEvidence).Scan(&res.Parked); err != nil {
				return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
			}
			return res, nil
		}
	}

	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	defer tx.Rollback()
	ts := newTxStmts(tx)
	defer ts.close()
	for len(cands) > 0 && len(res.Applied) < limit {
		// Provider ids that statuses matched by their callback reference
		// recorded: parked statuses of those ids (in that identity) can
		// go now.
		recorded := map[idKey]string{}
		for _, id := range cands {
			if len(res.Applied) == limit {
				break
			}
			ae, rec, err := s.applyEvidence(ctx, ts, id, now)
			if err != nil {
				return nil, err
			}
			if ae == nil {
				continue
			}
			res.Applied = append(res.Applied, *ae)
			if rec != nil {
				recorded[*rec] = ae.MessageID
			}
		}
		if cands, err = s.pendingOf(ctx, ts, recorded); err != nil {
			return nil, err
		}
		for k, msgID := range recorded {
			r, err := ts.exec(ctx, "UPDATE inbound SET message_id = ? WHERE message_id IS NULL AND context_id <> '' AND context_id = ? AND identity = ? "+
				"AND (sender = '' OR sender = (SELECT recipient FROM messages WHERE id = ?))", msgID, k.providerID, k.identity, msgID)
			if err != nil {
				return nil, fmt.Errorf("sqlite: apply evidence: attribute inbound: %w", err)
			}
			n, _ := r.RowsAffected()
			res.Attributed += int(n)
		}
	}
	for _, l := range links {
		r, err := ts.exec(ctx, "UPDATE inbound SET message_id = ? WHERE id = ? AND message_id IS NULL", l.msgID, l.id)
		if err != nil {
			return nil, fmt.Errorf("sqlite: apply evidence: attribute inbound: %w", err)
		}
		n, _ := r.RowsAffected()
		res.Attributed += int(n)
	}
	// What is still due and matches nothing (or waits for a drain's
	// answer): its next try.
	if _, err := ts.exec(ctx, retryParkedSQL, micros(now), store.DueBatch); err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	if _, err := ts.exec(ctx, retryRepliesSQL, micros(now), store.DueBatch); err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: attribute inbound: %w", err)
	}
	row, err := ts.queryRow(ctx, countParkedSQL, store.CounterParkedEvidence)
	if err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	if err := row.Scan(&res.Parked); err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: commit: %w", err)
	}
	return res, nil
}

// countParkedSQL reads the running count of pending statuses (0024).
const countParkedSQL = "SELECT coalesce((SELECT n FROM counters WHERE name = ?), 0)"

// idKey is a provider id within its identity.
type idKey struct{ identity, providerID string }

const matchCols = "id, identity, recipient, provider_id, state, lease_until"

// matchRows reads the rows st could be about (rules.Evidence decides):
// those of its identity with its provider id, and the one its callback
// reference names.
func matchRows(ctx context.Context, ts *txStmts, st *store.StatusEvidence) ([]store.MatchRow, *store.MatchRow, error) {
	scan := func(q string, args ...any) ([]store.MatchRow, error) {
		stmt, err := ts.prepare(ctx, q)
		if err != nil {
			return nil, err
		}
		rs, err := stmt.QueryContext(ctx, args...)
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []store.MatchRow
		for rs.Next() {
			var (
				m     store.MatchRow
				stt   string
				lease sql.NullInt64
			)
			if err := rs.Scan(&m.ID, &m.Identity, &m.Recipient, &m.ProviderID, &stt, &lease); err != nil {
				return nil, err
			}
			m.State, m.LeaseUntil = state.State(stt), fromNullMicros(lease)
			out = append(out, m)
		}
		return out, rs.Err()
	}
	var byPID []store.MatchRow
	var err error
	if st.ProviderID != "" {
		byPID, err = scan("SELECT "+matchCols+" FROM messages WHERE identity = ? AND provider_id = ? AND provider_id <> '' ORDER BY id LIMIT 2",
			st.Identity, st.ProviderID)
		if err != nil {
			return nil, nil, err
		}
	}
	var ref *store.MatchRow
	if st.CallbackRef != "" {
		refs, err := scan("SELECT "+matchCols+" FROM messages WHERE id = ?", st.CallbackRef)
		if err != nil {
			return nil, nil, err
		}
		if len(refs) == 1 {
			ref = &refs[0]
		}
	}
	return byPID, ref, nil
}

// applyEvidence applies the pending status id, if it is still pending
// and its row is there and not under a live lease (nil otherwise), with
// its outcome marked in the same transaction as its transition; or sets
// it aside as suspect (rules.Evidence decides). It returns the provider
// id it recorded on the row (matched by reference), if it did.
func (s *Store) applyEvidence(ctx context.Context, ts *txStmts, id string, now time.Time) (*store.AppliedEvidence, *idKey, error) {
	row, err := ts.queryRow(ctx, "SELECT "+evidenceCols+" FROM evidence WHERE id = ? AND outcome = ''", id)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	st, err := scanEvidence(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, nil // applied by another process meanwhile
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	byPID, ref, err := matchRows(ctx, ts, st)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	step, err := rules.Evidence(st, byPID, ref, now)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	case step.Pending:
		return nil, nil, nil // parked: the drain holding the lease records its own answer
	case step.Suspect != "":
		if _, err := ts.exec(ctx, "UPDATE evidence SET outcome = ?, suspect = ?, applied_at = ? WHERE id = ?",
			store.EvidenceSuspect, step.Suspect, micros(now), st.ID); err != nil {
			return nil, nil, fmt.Errorf("sqlite: apply evidence: %w", err)
		}
		return &step.Applied, nil, nil
	}
	if step.Transition != nil {
		if _, err := s.applyTransition(ctx, ts, step.Transition); err != nil {
			// The row was read under the write lock just now: any
			// error here is the database's.
			return nil, nil, fmt.Errorf("sqlite: apply evidence %s to %s: %w", st.ID, step.Applied.MessageID, err)
		}
	}
	if _, err := ts.exec(ctx, "UPDATE evidence SET outcome = ?, message_id = ?, applied_at = ? WHERE id = ?",
		step.Applied.Outcome, step.Applied.MessageID, micros(now), st.ID); err != nil {
		return nil, nil, fmt.Errorf("sqlite: apply evidence: %w", err)
	}
	if !step.RecordsID {
		return &step.Applied, nil, nil
	}
	return &step.Applied, &idKey{identity: st.Identity, providerID: st.ProviderID}, nil
}

// pendingOf returns the pending statuses of the given provider ids (each
// within its identity), oldest provider timestamp first.
func (s *Store) pendingOf(ctx context.Context, ts *txStmts, pids map[idKey]string) ([]string, error) {
	type item struct {
		id string
		at int64
	}
	var items []item
	for k := range pids {
		st, err := ts.prepare(ctx, "SELECT id, at FROM evidence INDEXED BY evidence_pending_provider WHERE outcome = '' AND identity = ? AND provider_id = ?")
		if err != nil {
			return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
		}
		rs, err := st.QueryContext(ctx, k.identity, k.providerID)
		if err != nil {
			return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
		}
		for rs.Next() {
			var it item
			if err := rs.Scan(&it.id, &it.at); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
			}
			items = append(items, it)
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: apply evidence: %w", err)
		}
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].at != items[j].at {
			return items[i].at < items[j].at
		}
		return items[i].id < items[j].id
	})
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.id
	}
	return out, nil
}

func (s *Store) queryIDs(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rs, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rs.Err()
}

type link struct{ id, msgID string }

func (s *Store) attributeCandidates(ctx context.Context, now time.Time, limit int) ([]link, error) {
	rs, err := s.r.QueryContext(ctx, attributeCandidatesSQL, micros(now), limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: apply evidence: attribute inbound: %w", err)
	}
	defer rs.Close()
	var out []link
	for rs.Next() {
		var l link
		if err := rs.Scan(&l.id, &l.msgID); err != nil {
			return nil, fmt.Errorf("sqlite: apply evidence: attribute inbound: %w", err)
		}
		out = append(out, l)
	}
	return out, rs.Err()
}

// EvidenceList returns a row's statuses, or with id "" the parked ones,
// oldest provider timestamp first.
func (s *Store) EvidenceList(ctx context.Context, id string, limit int) ([]store.StatusEvidence, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + evidenceCols + " FROM evidence INDEXED BY evidence_message WHERE message_id = ? ORDER BY at, id LIMIT ?"
	args := []any{id, limit}
	if id == "" {
		q = "SELECT " + evidenceCols + " FROM evidence INDEXED BY evidence_pending WHERE outcome = '' ORDER BY at, id LIMIT ?"
		args = []any{limit}
	}
	rs, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list evidence: %w", err)
	}
	defer rs.Close()
	out := []store.StatusEvidence{}
	for rs.Next() {
		st, err := scanEvidence(rs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list evidence: %w", err)
		}
		out = append(out, *st)
	}
	return out, rs.Err()
}

// EvidenceSuspects returns the statuses set aside as suspect, oldest
// received first.
func (s *Store) EvidenceSuspects(ctx context.Context, limit int) ([]store.StatusEvidence, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.r.QueryContext(ctx, "SELECT "+evidenceCols+" FROM evidence INDEXED BY evidence_suspect WHERE outcome = 'suspect' "+
		"ORDER BY received_at, id LIMIT ?", limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: suspect evidence: %w", err)
	}
	defer rs.Close()
	out := []store.StatusEvidence{}
	for rs.Next() {
		st, err := scanEvidence(rs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: suspect evidence: %w", err)
		}
		out = append(out, *st)
	}
	return out, rs.Err()
}

// ProviderIDCollisions returns the rows whose provider id another row of
// their identity has too, by identity and provider id.
func (s *Store) ProviderIDCollisions(ctx context.Context, limit int) ([]store.Collision, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.r.QueryContext(ctx, collisionsSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: provider id collisions: %w", err)
	}
	defer rs.Close()
	out := []store.Collision{}
	for rs.Next() {
		var (
			c       store.Collision
			stt     string
			created int64
		)
		if err := rs.Scan(&c.MessageID, &c.Identity, &c.ProviderID, &stt, &created); err != nil {
			return nil, fmt.Errorf("sqlite: provider id collisions: %w", err)
		}
		c.State, c.CreatedAt = state.State(stt), fromMicros(created)
		out = append(out, c)
	}
	return out, rs.Err()
}

// collisionsSQL lists the marked rows, which are every row of each
// colliding (identity, provider id): the migration marks them all, and a
// transition that gives a row an id its identity has marks both sides.
const collisionsSQL = `SELECT id, identity, provider_id, state, created_at FROM messages INDEXED BY messages_provider_id_collision
WHERE provider_id_collision <> '' ORDER BY identity, provider_id, id LIMIT ?`

const inboundCols = `id, event_id, provider, identity, provider_message_id, sender, type, text, reply_id, reply_title,
	context_id, message_id, received_at, stored_at`

// InboxList returns inbound messages, newest first.
func (s *Store) InboxList(ctx context.Context, p *store.InboxParams) ([]store.Inbound, error) {
	var where []string
	var args []any
	index := "inbound_received"
	if p.Unattributed {
		// The literal predicate lets SQLite use the partial index.
		where, index = append(where, "message_id IS NULL"), "inbound_unattributed"
	}
	if p.MessageID != "" {
		where, args, index = append(where, "message_id IS NOT NULL", "message_id = ?"), append(args, p.MessageID), "inbound_message"
	}
	if p.Identity != "" {
		where, args = append(where, "identity = ?"), append(args, p.Identity)
	}
	if p.From != "" {
		where, args = append(where, "sender = ?"), append(args, p.From)
	}
	if !p.Since.IsZero() {
		where, args = append(where, "received_at >= ?"), append(args, micros(p.Since))
	}
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + inboundCols + " FROM inbound INDEXED BY " + index
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY received_at DESC, id DESC LIMIT ?"
	rs, err := s.r.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: inbox: %w", err)
	}
	defer rs.Close()
	out := []store.Inbound{}
	for rs.Next() {
		var (
			in                 store.Inbound
			msgID              sql.NullString
			received, storedAt int64
		)
		if err := rs.Scan(&in.ID, &in.EventID, &in.Provider, &in.Identity, &in.ProviderMessageID, &in.From, &in.Type, &in.Text,
			&in.ReplyID, &in.ReplyTitle, &in.ContextID, &msgID, &received, &storedAt); err != nil {
			return nil, fmt.Errorf("sqlite: inbox: %w", err)
		}
		if msgID.Valid {
			in.MessageID = &msgID.String
		}
		in.ReceivedAt, in.StoredAt = fromMicros(received), fromMicros(storedAt)
		out = append(out, in)
	}
	return out, rs.Err()
}

// ServiceWindow returns when recipient last wrote to identity.
func (s *Store) ServiceWindow(ctx context.Context, identity, recipient string) (time.Time, error) {
	var at int64
	err := s.r.QueryRowContext(ctx, "SELECT last_inbound_at FROM service_windows WHERE identity = ? AND recipient = ?",
		identity, recipient).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: service window: %w", err)
	}
	return fromMicros(at), nil
}

// WebhookStats returns the evidence figures, of one moment.
func (s *Store) WebhookStats(ctx context.Context) (*store.WebhookStats, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: webhook stats: %w", err)
	}
	defer tx.Rollback()
	counters, err := readCounters(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("sqlite: webhook stats: %w", err)
	}
	st := store.Stats{VitalStats: store.VitalStats{MaybeSent: map[string]int{}}}
	rules.SetCounters(&st, counters)
	if err := webhookStats(ctx, tx, &st.WebhookStats); err != nil {
		return nil, err
	}
	return &st.WebhookStats, nil
}

// webhookStats reads the evidence figures the running counts
// (rules.SetCounters: duplicates, parked and suspect statuses,
// unattributed replies, unreadable deliveries, collisions, notices) do
// not give: the deliveries not yet processed and the queued rows a
// template holds from their partial indexes (work waiting), the template
// holds from their table (a row per template).
func webhookStats(ctx context.Context, q querier, st *store.WebhookStats) error {
	for _, f := range []struct {
		q    string
		args []any
		dest any
	}{
		{"SELECT count(*) FROM webhook_events INDEXED BY webhook_events_pending WHERE processed_at IS NULL", nil, &st.UnprocessedWebhooks},
		{"SELECT count(*) FROM template_holds WHERE status IN ('PAUSED', 'DISABLED', 'REJECTED')", nil, &st.TemplateHolds},
		{"SELECT count(*) FROM messages INDEXED BY messages_template_held WHERE state = 'queued' AND substr(last_error, 1, 15) = 'template hold: '", nil, &st.TemplateHeldRows},
	} {
		if err := q.QueryRowContext(ctx, f.q, f.args...).Scan(f.dest); err != nil {
			return fmt.Errorf("sqlite: webhook stats: %w", err)
		}
	}
	return nil
}

// Retention's predicates, each the literal WHERE of its partial index
// (webhook_events_done, inbound_text) and a bound: SQLite uses a partial
// index only when the statement repeats its predicate, and the statements
// name the index (INDEXED BY), so a plan that would walk the table is an
// error rather than a slow purge.
const (
	purgeEventsWhere  = "processed_at IS NOT NULL AND error = '' AND received_at < ?"
	purgeInboundWhere = "(text <> '' OR reply_title <> '') AND stored_at < ?"
)

// Each batch is one statement, so one short write transaction of at most
// purgeBatch rows: drains and webhook ingests wait for a batch, never for
// the whole purge.
var (
	purgeEventsSQL = "DELETE FROM webhook_events WHERE id IN (SELECT id FROM webhook_events INDEXED BY webhook_events_done WHERE " +
		purgeEventsWhere + " ORDER BY received_at, id LIMIT ?)"
	purgeInboundSQL = "UPDATE inbound SET text = '', reply_title = '' WHERE id IN (SELECT id FROM inbound INDEXED BY inbound_text WHERE " +
		purgeInboundWhere + " ORDER BY stored_at, id LIMIT ?)"
)

// WebhookPurge deletes old events read without an error and blanks the
// texts of old inbound messages, in batches (p.Tenant and p.Purpose do not
// apply: webhooks have neither).
func (s *Store) WebhookPurge(ctx context.Context, p *store.PurgeParams) (*store.WebhookPurged, error) {
	before := micros(p.Before)
	res := &store.WebhookPurged{}
	if p.DryRun {
		// One read transaction: both counts of one moment.
		tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return nil, fmt.Errorf("sqlite: webhook purge: %w", err)
		}
		defer tx.Rollback()
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM webhook_events INDEXED BY webhook_events_done WHERE "+purgeEventsWhere,
			before).Scan(&res.Events); err != nil {
			return nil, fmt.Errorf("sqlite: webhook purge: %w", err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM inbound INDEXED BY inbound_text WHERE "+purgeInboundWhere,
			before).Scan(&res.Inbound); err != nil {
			return nil, fmt.Errorf("sqlite: webhook purge: %w", err)
		}
		return res, nil
	}
	for _, b := range []struct {
		q, what string
		n       *int
	}{
		{purgeEventsSQL, "events", &res.Events},
		{purgeInboundSQL, "inbound", &res.Inbound},
	} {
		for {
			r, err := s.w.ExecContext(ctx, b.q, before, purgeBatch)
			if err != nil {
				// What earlier batches did is committed: say so.
				return res, fmt.Errorf("sqlite: webhook purge %s: %w", b.what, err)
			}
			n, err := r.RowsAffected()
			if err != nil {
				return res, fmt.Errorf("sqlite: webhook purge %s: %w", b.what, err)
			}
			*b.n += int(n)
			if n < purgeBatch {
				break
			}
		}
	}
	return res, nil
}
