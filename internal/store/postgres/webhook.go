package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// insertWebhooksSQL stores a batch of events as one statement over column
// arrays: one round trip, autocommitted (durable once it returns, as
// synchronous_commit is on). An event whose dedupe key its provider and
// identity have already (webhook_events_dedupe, a partial unique index:
// the conflict target repeats its predicate), or that an earlier event of
// the batch carries, is skipped; only that conflict is, so an id twice is
// an error rather than a delivery silently dropped. The statement returns
// the ids it wrote, and counts the skipped ones in the same statement: the
// replays ($9) and their items ($10), only when there are any (so ordinary
// deliveries never touch the counter rows), in name order (so two
// statements never wait for each other's counter row in opposite orders).
const insertWebhooksSQL = `WITH v AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[], $7::text[], $8::bigint[])
        AS v(id, provider, identity, headers, body, received_at, dedupe_key, items)
), ins AS (
    INSERT INTO webhook_events (id, provider, identity, headers, body, received_at, dedupe_key)
    SELECT id, provider, identity, headers, body, received_at, dedupe_key FROM v
    ON CONFLICT (provider, identity, dedupe_key) WHERE dedupe_key <> '' DO NOTHING
    RETURNING id
), skipped AS (
    SELECT count(*) AS n, coalesce(sum(items), 0) AS items FROM v WHERE id NOT IN (SELECT id FROM ins)
), counted AS (
    INSERT INTO counters (name, n)
    SELECT c.name, c.n FROM skipped, LATERAL (VALUES ($9::text, skipped.n), ($10::text, skipped.items)) AS c(name, n)
    WHERE c.n > 0 ORDER BY c.name
    ON CONFLICT (name) DO UPDATE SET n = counters.n + excluded.n
)
SELECT id FROM ins`

// WebhookStore keeps raw events in one durable statement; an event whose
// dedupe key is stored already is skipped and counted (see store.Evidence).
func (s *Store) WebhookStore(ctx context.Context, evs []store.WebhookEvent) error {
	if len(evs) == 0 {
		return nil
	}
	// The host's clock, not the server's: a received time orders and
	// ages raw deliveries (retention), which no lease or schedule depends
	// on, and a clock read would cost the receiver's one round trip.
	now := time.Now().UTC().Truncate(store.Resolution)
	if s.now != nil {
		now = s.now().UTC().Truncate(store.Resolution)
	}
	n := len(evs)
	ids, providers, identities, headers, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bodies := make([][]byte, n)
	recv := make([]time.Time, n)
	items := make([]int64, n)
	for i := range evs {
		ev := &evs[i]
		ids[i], providers[i], identities[i], keys[i], items[i] = s.ids.New(now), ev.Provider, ev.Identity, ev.DedupeKey, int64(ev.Items)
		recv[i] = now
		if !ev.ReceivedAt.IsZero() {
			recv[i] = ev.ReceivedAt.UTC().Truncate(store.Resolution)
		}
		h, err := rules.Headers(ev.Headers)
		if err != nil {
			return fmt.Errorf("postgres: store webhook: %w", err)
		}
		headers[i] = h
		bodies[i] = ev.Body
		if bodies[i] == nil {
			bodies[i] = []byte{} // the column is NOT NULL: an empty body is still a delivery
		}
	}
	rs, err := s.pool.Query(ctx, insertWebhooksSQL, ids, providers, identities, headers, bodies, recv, keys, items,
		store.CounterReplayedWebhooks, store.CounterDuplicateWebhooks)
	if err != nil {
		return fmt.Errorf("postgres: store webhook: %w", err)
	}
	written, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres: store webhook: %w", err)
	}
	stored := make(map[string]bool, len(written))
	for _, id := range written {
		stored[id] = true
	}
	// Only once durable: a failed call leaves the caller's events as they were.
	for i := range evs {
		if !stored[ids[i]] {
			evs[i].ID, evs[i].Replayed = "", true
			continue
		}
		evs[i].ID, evs[i].ReceivedAt, evs[i].Replayed = ids[i], recv[i], false
	}
	return nil
}

const webhookCols = `id, provider, identity, headers, body, received_at, processed_at, error, dedupe_key`

func scanWebhook(row pgx.Row) (*store.WebhookEvent, error) {
	var (
		ev        store.WebhookEvent
		headers   string
		processed *time.Time
	)
	if err := row.Scan(&ev.ID, &ev.Provider, &ev.Identity, &headers, &ev.Body, &ev.ReceivedAt, &processed, &ev.Error, &ev.DedupeKey); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(headers), &ev.Headers); err != nil {
		return nil, fmt.Errorf("webhook %s: headers: %w", ev.ID, err)
	}
	ev.ReceivedAt, ev.ProcessedAt = ev.ReceivedAt.UTC(), utcPtr(processed)
	return &ev, nil
}

// WebhookPending returns unprocessed events, oldest first.
func (s *Store) WebhookPending(ctx context.Context, limit int) ([]store.WebhookEvent, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.pool.Query(ctx, "SELECT "+webhookCols+" FROM webhook_events WHERE processed_at IS NULL ORDER BY received_at, id LIMIT $1", limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending webhooks: %w", err)
	}
	defer rs.Close()
	out := []store.WebhookEvent{}
	for rs.Next() {
		ev, err := scanWebhook(rs)
		if err != nil {
			return nil, fmt.Errorf("postgres: pending webhooks: %w", err)
		}
		out = append(out, *ev)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: pending webhooks: %w", err)
	}
	return out, nil
}

// WebhookGet returns one stored event.
func (s *Store) WebhookGet(ctx context.Context, id string) (*store.WebhookEvent, error) {
	ev, err := scanWebhook(s.pool.QueryRow(ctx, "SELECT "+webhookCols+" FROM webhook_events WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get webhook: %w", err)
	}
	return ev, nil
}

// WebhookUnreadable returns events processed with an error or skipped
// items, oldest first. The statement repeats webhook_events_unreadable's
// predicate literally, so that any plan of it, generic ones included, can
// walk that partial index in order.
func (s *Store) WebhookUnreadable(ctx context.Context, limit int) ([]store.WebhookEvent, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.pool.Query(ctx, "SELECT "+webhookCols+" FROM webhook_events WHERE error <> '' ORDER BY received_at, id LIMIT $1", limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: unreadable webhooks: %w", err)
	}
	defer rs.Close()
	out := []store.WebhookEvent{}
	for rs.Next() {
		ev, err := scanWebhook(rs)
		if err != nil {
			return nil, fmt.Errorf("postgres: unreadable webhooks: %w", err)
		}
		out = append(out, *ev)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: unreadable webhooks: %w", err)
	}
	return out, nil
}

// WebhookRetry puts an unreadable event back to pending, in one
// statement; only when it changes nothing does it read the event, to say
// why.
func (s *Store) WebhookRetry(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, "UPDATE webhook_events SET processed_at = NULL, error = '' WHERE id = $1 AND error <> ''", id)
	if err != nil {
		return fmt.Errorf("postgres: retry webhook: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var processed bool
	err = s.pool.QueryRow(ctx, "SELECT processed_at IS NOT NULL FROM webhook_events WHERE id = $1", id).Scan(&processed)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("postgres: retry webhook: %w", err)
	}
	return rules.RetryRefused(id, processed)
}

// insertEvidenceSQL writes new statuses in input order; the unique index
// turns a redelivery (also one within the batch) into no row, and the
// returned ids say which were new.
const insertEvidenceSQL = `INSERT INTO evidence (id, event_id, provider, identity, dedupe_key, provider_id, status, at,
	callback_ref, error_code, error, received_at, recipient, suspect, outcome)
SELECT v.id, v.event_id, v.provider, v.identity, v.dedupe_key, v.provider_id, v.status, v.at, v.callback_ref,
	v.error_code, v.error, v.received_at, v.recipient, v.suspect, CASE WHEN v.suspect <> '' THEN 'suspect' ELSE '' END
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[],
	$9::text[], $10::text[], $11::text[], $12::timestamptz[], $13::text[], $14::text[]) WITH ORDINALITY
	AS v(id, event_id, provider, identity, dedupe_key, provider_id, status, at, callback_ref, error_code, error, received_at,
		recipient, suspect, ord)
ORDER BY v.ord
ON CONFLICT (provider, identity, dedupe_key) DO NOTHING RETURNING id`

// insertInboundSQL writes new inbound messages, each linked to the row
// its reply context names: the one row of its identity with that
// provider id (none when two share it: a collision is for a person),
// sent to the one who wrote when the message names them.
const insertInboundSQL = `INSERT INTO inbound (id, event_id, provider, identity, provider_message_id, sender, type, text,
	reply_id, reply_title, context_id, message_id, received_at, stored_at)
SELECT v.id, v.event_id, v.provider, v.identity, v.pmid, v.sender, v.type, v.text, v.reply_id, v.reply_title, v.context_id,
	(SELECT CASE WHEN count(*) = 1 THEN min(m.id) END FROM messages m WHERE m.identity = v.identity AND m.provider_id = v.context_id
		AND m.provider_id <> '' AND (v.sender = '' OR m.recipient = v.sender)),
	v.received_at, $13
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
	$10::text[], $11::text[], $12::timestamptz[]) WITH ORDINALITY
	AS v(id, event_id, provider, identity, pmid, sender, type, text, reply_id, reply_title, context_id, received_at, ord)
ORDER BY v.ord
ON CONFLICT (provider, identity, provider_message_id) DO NOTHING RETURNING id, message_id`

const windowSQL = `INSERT INTO service_windows (identity, recipient, last_inbound_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
ON CONFLICT (identity, recipient) DO UPDATE SET last_inbound_at = greatest(service_windows.last_inbound_at, excluded.last_inbound_at)`

// releaseHeldSQL makes the rows held for the closed windows of the given
// identities and recipients due now ($3). Its predicate repeats
// messages_window_held's literally, so that the planner can use the
// partial index with any plan of the statement, generic ones included;
// the next_attempt_at term leaves rows already due untouched.
const releaseHeldSQL = `UPDATE messages m SET next_attempt_at = $3
FROM unnest($1::text[], $2::text[]) AS v(identity, recipient)
WHERE m.state = 'queued' AND m.last_error = '` + store.WindowHeld + `'
	AND m.identity = v.identity AND m.recipient = v.recipient AND m.next_attempt_at > $3`

// WebhookIngest writes what processing read from stored events in one
// transaction. The events are locked first, so that concurrent ingests
// of one event write it once: the second finds it processed.
func (s *Store) WebhookIngest(ctx context.Context, ps []store.IngestParams) (*store.IngestResult, error) {
	res := &store.IngestResult{}
	if len(ps) == 0 {
		return res, nil
	}
	var now time.Time
	err := s.inTx(ctx, "ingest", func(tx pgx.Tx) error {
		*res = store.IngestResult{}
		var cerr error
		if now, cerr = s.clock(ctx, tx); cerr != nil {
			return cerr
		}
		events, err := lockEvents(ctx, tx, ps)
		if err != nil {
			return err
		}
		var (
			sts        []*store.StatusEvidence
			ins        []*store.Inbound
			markIDs    []string
			markErrors []string
		)
		for _, e := range rules.Ingest(ps, events, now) {
			if e.Ev != nil {
				markIDs, markErrors = append(markIDs, e.P.EventID), append(markErrors, e.Mark)
			}
			if !e.Write {
				continue
			}
			for j := range e.P.Statuses {
				sts = append(sts, &e.P.Statuses[j])
			}
			for j := range e.P.Inbound {
				ins = append(ins, &e.P.Inbound[j])
			}
			if err := s.ingestNotices(ctx, tx, e.P, e.Ev, e.Received, res); err != nil {
				return err
			}
		}
		if err := s.insertStatuses(ctx, tx, sts, now, res); err != nil {
			return err
		}
		if err := s.insertInbound(ctx, tx, ins, now, res); err != nil {
			return err
		}
		if len(markIDs) > 0 {
			tag, err := tx.Exec(ctx, "UPDATE webhook_events w SET processed_at = $1, error = v.err "+
				"FROM unnest($2::text[], $3::text[]) AS v(id, err) WHERE w.id = v.id AND w.processed_at IS NULL", now, markIDs, markErrors)
			if err != nil {
				return fmt.Errorf("postgres: ingest: mark processed: %w", err)
			}
			res.Events = int(tag.RowsAffected())
		}
		if res.Duplicates > 0 {
			if _, err := tx.Exec(ctx, "INSERT INTO counters (name, n) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET n = counters.n + excluded.n",
				store.CounterDuplicateWebhooks, res.Duplicates); err != nil {
				return fmt.Errorf("postgres: ingest: count duplicates: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func lockEvents(ctx context.Context, tx pgx.Tx, ps []store.IngestParams) (map[string]*store.IngestedEvent, error) {
	ids := make([]string, len(ps))
	for i := range ps {
		ids[i] = ps[i].EventID
	}
	// In id order, so that two ingests of overlapping events wait for
	// each other rather than deadlock.
	rs, err := tx.Query(ctx, "SELECT id, provider, identity, received_at, processed_at IS NOT NULL FROM webhook_events "+
		"WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: ingest: read events: %w", err)
	}
	defer rs.Close()
	out := make(map[string]*store.IngestedEvent, len(ps))
	for rs.Next() {
		var id string
		ev := &store.IngestedEvent{}
		if err := rs.Scan(&id, &ev.Provider, &ev.Identity, &ev.ReceivedAt, &ev.Processed); err != nil {
			return nil, fmt.Errorf("postgres: ingest: read events: %w", err)
		}
		ev.ReceivedAt = ev.ReceivedAt.UTC()
		out[id] = ev
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: ingest: read events: %w", err)
	}
	return out, nil
}

func (s *Store) insertStatuses(ctx context.Context, tx pgx.Tx, sts []*store.StatusEvidence, now time.Time, res *store.IngestResult) error {
	if len(sts) == 0 {
		return nil
	}
	// By key, so that concurrent ingests sharing keys wait for each other
	// rather than deadlock; stable, so the first of a key in the batch is
	// the one kept.
	order := make([]*store.StatusEvidence, len(sts))
	copy(order, sts)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Provider != order[j].Provider {
			return order[i].Provider < order[j].Provider
		}
		if order[i].Identity != order[j].Identity {
			return order[i].Identity < order[j].Identity
		}
		return order[i].DedupeKey < order[j].DedupeKey
	})
	n := len(order)
	cols := make([][]string, 12)
	for c := range cols {
		cols[c] = make([]string, n)
	}
	ats, recv := make([]time.Time, n), make([]time.Time, n)
	byID := make(map[string]*store.StatusEvidence, n)
	for i, st := range order {
		id := s.ids.New(now)
		byID[id] = st
		for c, v := range []string{id, st.EventID, st.Provider, st.Identity, st.DedupeKey, st.ProviderID, string(st.Status),
			st.CallbackRef, st.ErrorCode, st.Error, st.Recipient, st.Suspect} {
			cols[c][i] = v
		}
		ats[i], recv[i] = st.At, st.ReceivedAt
	}
	rs, err := tx.Query(ctx, insertEvidenceSQL, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], ats,
		cols[7], cols[8], cols[9], recv, cols[10], cols[11])
	if err != nil {
		return fmt.Errorf("postgres: ingest status: %w", err)
	}
	ids, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres: ingest status: %w", err)
	}
	fresh := make(map[string]bool, len(ids))
	for _, id := range ids {
		byID[id].ID, fresh[id] = id, true
	}
	res.Statuses += len(ids)
	if len(ids) == n {
		return nil
	}
	var providers, identities, keys, events []string
	for _, st := range order {
		if st.ID == "" {
			providers, identities = append(providers, st.Provider), append(identities, st.Identity)
			keys, events = append(keys, st.DedupeKey), append(events, st.EventID)
		}
	}
	reread, err := rereads(ctx, tx, rereadEvidenceSQL, providers, identities, keys, events, fresh)
	if err != nil {
		return fmt.Errorf("postgres: ingest status: %w", err)
	}
	rules.CountRefused(res, len(keys), reread)
	return nil
}

// rereadEvidenceSQL and rereadInboundSQL find, for items the unique index
// refused (by provider, identity and key), the row holding each key and the event
// that wrote it. After the INSERT that refused them, under read committed,
// each such row is committed or this transaction's own. The LIMIT keeps
// each lookup a probe of the unique index (a subquery with one is not
// flattened into a join), so that the planner cannot choose to hash the
// whole table instead.
const (
	rereadEvidenceSQL = `SELECT v.ord, x.id, x.event_id FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS v(provider, identity, k, ord)
CROSS JOIN LATERAL (SELECT e.id, e.event_id FROM evidence e WHERE e.provider = v.provider AND e.identity = v.identity AND e.dedupe_key = v.k LIMIT 1) x`
	rereadInboundSQL = `SELECT v.ord, x.id, x.event_id FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS v(provider, identity, k, ord)
CROSS JOIN LATERAL (SELECT i.id, i.event_id FROM inbound i WHERE i.provider = v.provider AND i.identity = v.identity AND i.provider_message_id = v.k LIMIT 1) x`
)

// rereads counts the refused items (providers[i], identities[i], keys[i], of event
// events[i]) whose key is held by a row an earlier processing of the same
// event wrote: rereads, not duplicates. A row this statement wrote (fresh)
// makes its item a duplicate within the call.
func rereads(ctx context.Context, tx pgx.Tx, q string, providers, identities, keys, events []string, fresh map[string]bool) (int, error) {
	rs, err := tx.Query(ctx, q, providers, identities, keys)
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		var (
			ord       int64
			id, event string
		)
		if err := rs.Scan(&ord, &id, &event); err != nil {
			return 0, err
		}
		if rules.Reread(event, events[ord-1], fresh[id]) {
			n++
		}
	}
	return n, rs.Err()
}

func (s *Store) insertInbound(ctx context.Context, tx pgx.Tx, ins []*store.Inbound, now time.Time, res *store.IngestResult) error {
	if len(ins) == 0 {
		return nil
	}
	order := make([]*store.Inbound, len(ins))
	copy(order, ins)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Provider != order[j].Provider {
			return order[i].Provider < order[j].Provider
		}
		if order[i].Identity != order[j].Identity {
			return order[i].Identity < order[j].Identity
		}
		return order[i].ProviderMessageID < order[j].ProviderMessageID
	})
	n := len(order)
	cols := make([][]string, 11)
	for c := range cols {
		cols[c] = make([]string, n)
	}
	recv := make([]time.Time, n)
	byID := make(map[string]*store.Inbound, n)
	for i, in := range order {
		id := s.ids.New(now)
		byID[id] = in
		for c, v := range []string{id, in.EventID, in.Provider, in.Identity, in.ProviderMessageID, in.From, in.Type, in.Text,
			in.ReplyID, in.ReplyTitle, in.ContextID} {
			cols[c][i] = v
		}
		recv[i] = in.ReceivedAt
	}
	args := make([]any, 0, 13)
	for _, c := range cols {
		args = append(args, c)
	}
	rs, err := tx.Query(ctx, insertInboundSQL, append(args, recv, now)...)
	if err != nil {
		return fmt.Errorf("postgres: ingest inbound: %w", err)
	}
	type row struct {
		id    string
		msgID *string
	}
	var news []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.id, &r.msgID); err != nil {
			rs.Close()
			return fmt.Errorf("postgres: ingest inbound: %w", err)
		}
		news = append(news, r)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("postgres: ingest inbound: %w", err)
	}
	res.Inbound += len(news)
	if len(news) < n {
		fresh := make(map[string]bool, len(news))
		written := make(map[*store.Inbound]bool, len(news))
		for _, r := range news {
			fresh[r.id], written[byID[r.id]] = true, true
		}
		var providers, identities, keys, events []string
		for _, in := range order {
			if !written[in] {
				providers, identities = append(providers, in.Provider), append(identities, in.Identity)
				keys, events = append(keys, in.ProviderMessageID), append(events, in.EventID)
			}
		}
		reread, err := rereads(ctx, tx, rereadInboundSQL, providers, identities, keys, events, fresh)
		if err != nil {
			return fmt.Errorf("postgres: ingest inbound: %w", err)
		}
		rules.CountRefused(res, len(keys), reread)
	}
	stored := make([]*store.Inbound, len(news))
	for i, r := range news {
		in := byID[r.id]
		in.ID, in.StoredAt, in.MessageID = r.id, now, r.msgID
		stored[i] = in
	}
	ws := rules.Windows(stored)
	if len(ws) == 0 {
		return nil
	}
	idents, recips, ats := make([]string, len(ws)), make([]string, len(ws)), make([]time.Time, len(ws))
	for i, w := range ws {
		idents[i], recips[i], ats[i] = w.Identity, w.Recipient, w.At
	}
	if _, err := tx.Exec(ctx, windowSQL, idents, recips, ats); err != nil {
		return fmt.Errorf("postgres: ingest window: %w", err)
	}
	// The upsert above has locked each window's row, so two ingests
	// releasing the same rows take turns rather than deadlock.
	var relIdents, relRecips []string
	for _, w := range ws {
		if w.Release {
			relIdents, relRecips = append(relIdents, w.Identity), append(relRecips, w.Recipient)
		}
	}
	if len(relIdents) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, releaseHeldSQL, relIdents, relRecips, now)
	if err != nil {
		return fmt.Errorf("postgres: ingest: release held rows: %w", err)
	}
	res.Released += int(tag.RowsAffected())
	return nil
}

const evidenceCols = `id, event_id, provider, identity, dedupe_key, provider_id, status, at, callback_ref,
	error_code, error, message_id, outcome, received_at, applied_at, recipient, suspect`

func scanEvidence(row pgx.Row, extra ...any) (*store.StatusEvidence, error) {
	var (
		st      store.StatusEvidence
		status  string
		applied *time.Time
	)
	dest := []any{&st.ID, &st.EventID, &st.Provider, &st.Identity, &st.DedupeKey, &st.ProviderID, &status, &st.At,
		&st.CallbackRef, &st.ErrorCode, &st.Error, &st.MessageID, &st.Outcome, &st.ReceivedAt, &applied, &st.Recipient, &st.Suspect}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	st.Status, st.At, st.ReceivedAt, st.AppliedAt = state.State(status), st.At.UTC(), st.ReceivedAt.UTC(), utcPtr(applied)
	return &st, nil
}

// applyCandidatesSQL takes pending statuses that name a row (by provider
// id within their identity, or by callback reference) that no drain holds
// a live lease of, oldest provider timestamp first, locking them so that
// concurrent runs share the work instead of repeating it; applyBatch
// decides each (store.MatchStatus), which may set it aside as suspect.
// Parked statuses are passed over here rather than after the LIMIT: a
// backlog of statuses no row will ever claim (another system's sends on a
// shared number) must not starve new ones. Only statuses due ($1 at or
// after their retry_at: new ones, and parked ones whose time to be tried
// again has come) are read, the first $4 (store.DueBatch) along
// evidence_retry, so that a round never walks that backlog:
// retryParkedSQL sets the next try of what matched nothing.
// $3 are statuses this run already left pending (its own locks
// do not make SKIP LOCKED pass them over).
var applyCandidatesSQL = `SELECT ` + qualified("e", evidenceCols) + `
FROM evidence e
WHERE e.id = ANY(ARRAY(SELECT d.id FROM evidence d WHERE d.outcome = '' AND ` + retryDue("d", "$1") + `
		ORDER BY coalesce(d.retry_at, '-infinity'::timestamptz), d.at, d.id LIMIT $4))
	AND e.outcome = '' AND e.id <> ALL($3::text[]) AND ` + matchablePred + `
ORDER BY e.at, e.id
LIMIT $2
FOR UPDATE OF e SKIP LOCKED`

// retryDue says a parked status or unattributed reply (alias a) is due
// at t, in the terms of the evidence_retry and inbound_retry indexes: an
// expression whose statistics are those of their rows alone (0024), so
// that the planner reads the due ones from the index, never every parked
// row.
func retryDue(a, t string) string {
	return "coalesce(" + a + ".retry_at, '-infinity'::timestamptz) <= " + t
}

// matchablePred says a status e names a row (by provider id within its
// identity, or by callback reference) that no drain holds a live lease
// of at $1.
const matchablePred = `(
	(e.provider_id <> '' AND EXISTS (SELECT 1 FROM messages x WHERE x.identity = e.identity AND x.provider_id = e.provider_id
		AND x.provider_id <> '' AND NOT (x.state = 'sending' AND coalesce(x.lease_until > $1, false))))
	OR (e.callback_ref <> '' AND EXISTS (SELECT 1 FROM messages x WHERE x.id = e.callback_ref
		AND NOT (x.state = 'sending' AND coalesce(x.lease_until > $1, false)))))`

// matchRowsSQL finds the rows each candidate could be about: those of its
// identity with its provider id (two at most are needed to see a
// collision), and the one its callback reference names.
const matchRowsSQL = `SELECT v.ord, x.id, false FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS v(identity, pid, ord)
CROSS JOIN LATERAL (SELECT m.id FROM messages m WHERE v.pid <> '' AND m.identity = v.identity AND m.provider_id = v.pid
	AND m.provider_id <> '' ORDER BY m.id LIMIT 2) x
UNION ALL
SELECT v.ord, m.id, true FROM unnest($3::text[]) WITH ORDINALITY AS v(ref, ord) JOIN messages m ON m.id = v.ref AND v.ref <> ''`

// retryParkedSQL sets when the statuses due at $1 that name no row (or a
// row under a live lease) are tried again: after an eighth of their age
// (since received), so that a status that waits for a drain's answer is
// tried again within moments and one parked for a month every few days:
// what a round reads follows the statuses arriving, never those parked
// for ever. Statuses another run holds are left to it, and those that
// match stay due (a run that stopped at its limit left them). The due
// ones are read first, without locking them: a walk of evidence_retry
// alone, where FOR UPDATE would have the planner weigh reading every
// pending status and sorting them.
var retryParkedSQL = `UPDATE evidence e SET retry_at = $1 + greatest($1 - e.received_at, interval '0') / 8
WHERE e.id = ANY(ARRAY(SELECT id FROM evidence WHERE id = ANY(ARRAY(SELECT d.id FROM evidence d
		WHERE d.outcome = '' AND ` + retryDue("d", "$1") + ` ORDER BY coalesce(d.retry_at, '-infinity'::timestamptz), d.at, d.id LIMIT $2))
		FOR UPDATE SKIP LOCKED))
	AND NOT ` + matchablePred

// retryNowSQL makes the pending statuses of provider ids ($1 identities,
// $2 ids) due at once: a round that recorded them on their rows applies
// them in its next pass, however long they were parked.
const retryNowSQL = `UPDATE evidence SET retry_at = '-infinity'
WHERE outcome = '' AND (identity, provider_id) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND retry_at > '-infinity'`

// qualified prefixes each of a list of columns with a table alias.
func qualified(alias, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

type candidate struct {
	st    *store.StatusEvidence
	byPID []string // rows of its identity with its provider id
	ref   string   // the row its callback reference names, if any
}

// EvidenceApply applies pending statuses whose rows are known, as one
// transaction: the statuses are locked (SKIP LOCKED), then their rows (in
// id order, FOR UPDATE), and each is decided against its row as locked
// and written through the store's transition code with its outcome.
func (s *Store) EvidenceApply(ctx context.Context, p *store.ApplyParams) (*store.ApplyResult, error) {
	limit := rules.ApplyLimit(p)
	res := &store.ApplyResult{}
	err := s.inTx(ctx, "apply evidence", func(tx pgx.Tx) error {
		*res = store.ApplyResult{Applied: []store.AppliedEvidence{}}
		now, err := s.at(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		skipped := []string{}
		for len(res.Applied) < limit {
			cands, err := applyCandidates(ctx, tx, now, limit-len(res.Applied), skipped)
			if err != nil {
				return err
			}
			if len(cands) == 0 {
				break
			}
			applied, left, recorded, err := s.applyBatch(ctx, tx, cands, now)
			if err != nil {
				return err
			}
			res.Applied = append(res.Applied, applied...)
			skipped = append(skipped, left...)
			// Another pass only for statuses of provider ids this one
			// recorded on their rows (matched by callback reference).
			if len(recorded[0]) == 0 {
				break
			}
			if _, err := tx.Exec(ctx, retryNowSQL, recorded[0], recorded[1]); err != nil {
				return fmt.Errorf("postgres: apply evidence: %w", err)
			}
		}
		// What is still due and matches nothing (or waits for a
		// drain's answer): its next try.
		if _, err := tx.Exec(ctx, retryParkedSQL, now, store.DueBatch); err != nil {
			return fmt.Errorf("postgres: apply evidence: %w", err)
		}
		n, err := attribute(ctx, tx, now, store.DueBatch)
		if err != nil {
			return err
		}
		res.Attributed = n
		if err := tx.QueryRow(ctx, countParkedSQL, store.CounterParkedEvidence).Scan(&res.Parked); err != nil {
			return fmt.Errorf("postgres: apply evidence: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// attributeCandidatesSQL finds unattributed replies whose context has
// become the provider id of one row of their identity (sent to the one
// who wrote, when the reply names them). The lookup is a scalar subquery, one index
// probe per waiting reply, so that the planner cannot choose to walk every
// sent row's provider id (a merge join) instead.
// Only replies due ($1 at or after their retry_at) are read, the first $2
// (store.DueBatch) along inbound_retry, as applyCandidatesSQL's statuses; retryRepliesSQL
// sets the next try of those still linked to nothing, as retryParkedSQL
// does for statuses: replies about messages some other system sent are
// never linked, and must not be read again on every round.
var attributeCandidatesSQL = `SELECT id, mid FROM (
	SELECT u.id, (SELECT CASE WHEN count(*) = 1 THEN min(m.id) END FROM messages m WHERE m.identity = u.identity
		AND m.provider_id = u.context_id AND m.provider_id <> '' AND (u.sender = '' OR m.recipient = u.sender)) AS mid
	FROM inbound u WHERE u.id = ANY(ARRAY(SELECT d.id FROM inbound d WHERE d.message_id IS NULL AND d.context_id <> ''
		AND ` + retryDue("d", "$1") + ` ORDER BY coalesce(d.retry_at, '-infinity'::timestamptz), d.id LIMIT $2))) l
WHERE mid IS NOT NULL`

var retryRepliesSQL = `UPDATE inbound u SET retry_at = $1 + greatest($1 - u.stored_at, interval '0') / 8
WHERE u.id = ANY(ARRAY(SELECT id FROM inbound WHERE id = ANY(ARRAY(SELECT d.id FROM inbound d
		WHERE d.message_id IS NULL AND d.context_id <> '' AND ` + retryDue("d", "$1") + `
		ORDER BY coalesce(d.retry_at, '-infinity'::timestamptz), d.id LIMIT $2)) FOR UPDATE SKIP LOCKED))
	AND u.message_id IS NULL AND (SELECT count(*) FROM messages m WHERE m.identity = u.identity
		AND m.provider_id = u.context_id AND m.provider_id <> '' AND (u.sender = '' OR m.recipient = u.sender)) <> 1`

// attribute links the replies attributeCandidatesSQL finds, by id, sets
// the next try of the others, and returns how many it linked (a
// concurrent run may have linked some).
func attribute(ctx context.Context, tx pgx.Tx, now time.Time, limit int) (int, error) {
	rs, err := tx.Query(ctx, attributeCandidatesSQL, now, limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: apply evidence: attribute inbound: %w", err)
	}
	var ids, mids []string
	for rs.Next() {
		var id, mid string
		if err := rs.Scan(&id, &mid); err != nil {
			rs.Close()
			return 0, fmt.Errorf("postgres: apply evidence: attribute inbound: %w", err)
		}
		ids, mids = append(ids, id), append(mids, mid)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("postgres: apply evidence: attribute inbound: %w", err)
	}
	n := 0
	if len(ids) > 0 {
		tag, err := tx.Exec(ctx, "UPDATE inbound i SET message_id = v.mid FROM unnest($1::text[], $2::text[]) AS v(id, mid) "+
			"WHERE i.id = v.id AND i.message_id IS NULL", ids, mids)
		if err != nil {
			return 0, fmt.Errorf("postgres: apply evidence: attribute inbound: %w", err)
		}
		n = int(tag.RowsAffected())
	}
	if _, err := tx.Exec(ctx, retryRepliesSQL, now, limit); err != nil {
		return 0, fmt.Errorf("postgres: apply evidence: attribute inbound: %w", err)
	}
	return n, nil
}

// countParkedSQL reads the running count of pending statuses (0024).
const countParkedSQL = "SELECT coalesce(sum(n), 0) FROM (SELECT n FROM counters WHERE name = $1 UNION ALL SELECT n FROM counter_deltas WHERE name = $1) c"

func applyCandidates(ctx context.Context, tx pgx.Tx, now time.Time, limit int, skipped []string) ([]candidate, error) {
	rs, err := tx.Query(ctx, applyCandidatesSQL, now, limit, skipped, store.DueBatch)
	if err != nil {
		return nil, fmt.Errorf("postgres: apply evidence: %w", err)
	}
	var out []candidate
	for rs.Next() {
		st, err := scanEvidence(rs)
		if err != nil {
			rs.Close()
			return nil, fmt.Errorf("postgres: apply evidence: %w", err)
		}
		out = append(out, candidate{st: st})
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: apply evidence: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	identities, pids, refs := make([]string, len(out)), make([]string, len(out)), make([]string, len(out))
	for i, c := range out {
		identities[i], pids[i], refs[i] = c.st.Identity, c.st.ProviderID, c.st.CallbackRef
	}
	mr, err := tx.Query(ctx, matchRowsSQL, identities, pids, refs)
	if err != nil {
		return nil, fmt.Errorf("postgres: apply evidence: match: %w", err)
	}
	defer mr.Close()
	for mr.Next() {
		var (
			ord   int64
			id    string
			byRef bool
		)
		if err := mr.Scan(&ord, &id, &byRef); err != nil {
			return nil, fmt.Errorf("postgres: apply evidence: match: %w", err)
		}
		c := &out[ord-1]
		if byRef {
			c.ref = id
		} else {
			c.byPID = append(c.byPID, id)
		}
	}
	if err := mr.Err(); err != nil {
		return nil, fmt.Errorf("postgres: apply evidence: match: %w", err)
	}
	return out, nil
}

// applyBatch locks the rows of cands, decides each status in order
// against its rows as they stand after the ones before (store.MatchStatus),
// and writes the transitions and outcomes, suspects set aside. It returns
// what it applied, the statuses it left pending (their row moved or took a
// lease since they were chosen), and the provider ids it recorded on
// their rows (identities, ids).
func (s *Store) applyBatch(ctx context.Context, tx pgx.Tx, cands []candidate, now time.Time) ([]store.AppliedEvidence, []string, [2][]string, error) {
	ids := make([]string, 0, len(cands))
	for _, c := range cands {
		ids = append(ids, c.byPID...)
		if c.ref != "" {
			ids = append(ids, c.ref)
		}
	}
	rows, err := lockRows(ctx, tx, ids)
	if err != nil {
		return nil, nil, [2][]string{}, err
	}
	var (
		applied  []store.AppliedEvidence
		suspects []store.AppliedEvidence
		whys     []string
		left     []string
		ps       []store.TransitionParams
		recorded [2][]string // identities, provider ids
	)
	for _, c := range cands {
		st := c.st
		// As locked: a row whose provider id changed since it was chosen
		// is no longer one of the status's.
		var byPID []store.MatchRow
		for _, id := range c.byPID {
			if m := rows[id]; m != nil && m.ProviderID == st.ProviderID && m.Identity == st.Identity {
				byPID = append(byPID, *m)
			}
		}
		var ref *store.MatchRow
		if c.ref != "" {
			ref = rows[c.ref]
		}
		step, err := rules.Evidence(st, byPID, ref, now)
		switch {
		case err != nil:
			return nil, nil, recorded, fmt.Errorf("postgres: apply evidence: %w", err)
		case step.Pending:
			// No row yet, or a drain claimed it since: it records its own
			// answer; the next run matches again.
			left = append(left, st.ID)
			continue
		case step.Suspect != "":
			suspects, whys = append(suspects, step.Applied), append(whys, step.Suspect)
			continue
		}
		if step.Transition != nil {
			ps = append(ps, *step.Transition)
			if step.RecordsID {
				recorded[0], recorded[1] = append(recorded[0], st.Identity), append(recorded[1], st.ProviderID)
			}
			// Later statuses of the batch see the row as this one leaves it.
			r := rows[step.Transition.ID]
			*r = step.After(*r)
		}
		applied = append(applied, step.Applied)
	}
	if len(ps) > 0 {
		out, err := s.transitionMany(ctx, tx, ps)
		if err != nil {
			return nil, nil, recorded, err
		}
		for i, o := range out {
			if o.Err != nil {
				// Decided against the row under its lock: an error here
				// is no lost race but a fault.
				return nil, nil, recorded, fmt.Errorf("postgres: apply evidence to %s: %w", ps[i].ID, o.Err)
			}
		}
	}
	if len(applied) > 0 {
		eids, outcomes, msgIDs := make([]string, len(applied)), make([]string, len(applied)), make([]string, len(applied))
		for i, a := range applied {
			eids[i], outcomes[i], msgIDs[i] = a.EvidenceID, a.Outcome, a.MessageID
		}
		if _, err := tx.Exec(ctx, "UPDATE evidence e SET outcome = v.outcome, message_id = v.message_id, applied_at = $1 "+
			"FROM unnest($2::text[], $3::text[], $4::text[]) AS v(id, outcome, message_id) WHERE e.id = v.id",
			now, eids, outcomes, msgIDs); err != nil {
			return nil, nil, recorded, fmt.Errorf("postgres: apply evidence: %w", err)
		}
	}
	if len(suspects) > 0 {
		eids := make([]string, len(suspects))
		for i, a := range suspects {
			eids[i] = a.EvidenceID
		}
		if _, err := tx.Exec(ctx, "UPDATE evidence e SET outcome = 'suspect', suspect = v.why, applied_at = $1 "+
			"FROM unnest($2::text[], $3::text[]) AS v(id, why) WHERE e.id = v.id", now, eids, whys); err != nil {
			return nil, nil, recorded, fmt.Errorf("postgres: apply evidence: set aside: %w", err)
		}
	}
	return append(applied, suspects...), left, recorded, nil
}

// lockRows locks rows by id, in id order (as every multi-row lock in this
// store), so that two runs, or a run and a drain, never deadlock. It
// returns what matching a status reads of each row.
func lockRows(ctx context.Context, tx pgx.Tx, ids []string) (map[string]*store.MatchRow, error) {
	rs, err := tx.Query(ctx, "SELECT id, state, lease_until, provider_id, identity, recipient FROM messages WHERE id = ANY($1) ORDER BY id FOR UPDATE", ids)
	if err != nil {
		return nil, fmt.Errorf("postgres: apply evidence: %w", err)
	}
	defer rs.Close()
	out := make(map[string]*store.MatchRow, len(ids))
	for rs.Next() {
		var st string
		r := &store.MatchRow{}
		if err := rs.Scan(&r.ID, &st, &r.LeaseUntil, &r.ProviderID, &r.Identity, &r.Recipient); err != nil {
			return nil, fmt.Errorf("postgres: apply evidence: %w", err)
		}
		r.State, r.LeaseUntil = state.State(st), utcPtr(r.LeaseUntil)
		out[r.ID] = r
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: apply evidence: %w", err)
	}
	return out, nil
}

// EvidenceSuspects returns the statuses set aside as suspect, oldest
// received first.
func (s *Store) EvidenceSuspects(ctx context.Context, limit int) ([]store.StatusEvidence, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.pool.Query(ctx, "SELECT "+evidenceCols+" FROM evidence WHERE outcome = 'suspect' ORDER BY received_at, id LIMIT $1", limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: suspect evidence: %w", err)
	}
	defer rs.Close()
	out := []store.StatusEvidence{}
	for rs.Next() {
		st, err := scanEvidence(rs)
		if err != nil {
			return nil, fmt.Errorf("postgres: suspect evidence: %w", err)
		}
		out = append(out, *st)
	}
	return out, rs.Err()
}

// ProviderIDCollisions returns the rows whose provider id another row of
// their identity has too (all of them are marked: by the migration, or by
// the transition that gave one of them the id), by identity and provider
// id.
func (s *Store) ProviderIDCollisions(ctx context.Context, limit int) ([]store.Collision, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	rs, err := s.pool.Query(ctx, "SELECT id, identity, provider_id, state, created_at FROM messages WHERE provider_id_collision <> '' "+
		"ORDER BY identity, provider_id, id LIMIT $1", limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: provider id collisions: %w", err)
	}
	defer rs.Close()
	out := []store.Collision{}
	for rs.Next() {
		var (
			c   store.Collision
			stt string
		)
		if err := rs.Scan(&c.MessageID, &c.Identity, &c.ProviderID, &stt, &c.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: provider id collisions: %w", err)
		}
		c.State, c.CreatedAt = state.State(stt), c.CreatedAt.UTC()
		out = append(out, c)
	}
	return out, rs.Err()
}

// EvidenceList returns a row's statuses, or with id "" the parked ones,
// oldest provider timestamp first.
func (s *Store) EvidenceList(ctx context.Context, id string, limit int) ([]store.StatusEvidence, error) {
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + evidenceCols + " FROM evidence WHERE message_id = $1 ORDER BY at, id LIMIT $2"
	args := []any{id, limit}
	if id == "" {
		q = "SELECT " + evidenceCols + " FROM evidence WHERE outcome = '' ORDER BY at, id LIMIT $1"
		args = []any{limit}
	}
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list evidence: %w", err)
	}
	defer rs.Close()
	out := []store.StatusEvidence{}
	for rs.Next() {
		st, err := scanEvidence(rs)
		if err != nil {
			return nil, fmt.Errorf("postgres: list evidence: %w", err)
		}
		out = append(out, *st)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list evidence: %w", err)
	}
	return out, nil
}

const inboundCols = `id, event_id, provider, identity, provider_message_id, sender, type, text, reply_id, reply_title,
	context_id, message_id, received_at, stored_at`

// InboxList returns inbound messages, newest first.
func (s *Store) InboxList(ctx context.Context, p *store.InboxParams) ([]store.Inbound, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1))
	}
	if p.Unattributed {
		where = append(where, "message_id IS NULL")
	}
	if p.MessageID != "" {
		where = append(where, "message_id IS NOT NULL")
		add("message_id = ?", p.MessageID)
	}
	if p.Identity != "" {
		add("identity = ?", p.Identity)
	}
	if p.From != "" {
		add("sender = ?", p.From)
	}
	if !p.Since.IsZero() {
		add("received_at >= ?", p.Since.UTC())
	}
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + inboundCols + " FROM inbound"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit)
	q += " ORDER BY received_at DESC, id DESC LIMIT $" + strconv.Itoa(len(args))
	rs, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox: %w", err)
	}
	defer rs.Close()
	out := []store.Inbound{}
	for rs.Next() {
		var in store.Inbound
		if err := rs.Scan(&in.ID, &in.EventID, &in.Provider, &in.Identity, &in.ProviderMessageID, &in.From, &in.Type, &in.Text,
			&in.ReplyID, &in.ReplyTitle, &in.ContextID, &in.MessageID, &in.ReceivedAt, &in.StoredAt); err != nil {
			return nil, fmt.Errorf("postgres: inbox: %w", err)
		}
		in.ReceivedAt, in.StoredAt = in.ReceivedAt.UTC(), in.StoredAt.UTC()
		out = append(out, in)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("postgres: inbox: %w", err)
	}
	return out, nil
}

// ServiceWindow returns when recipient last wrote to identity.
func (s *Store) ServiceWindow(ctx context.Context, identity, recipient string) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, "SELECT last_inbound_at FROM service_windows WHERE identity = $1 AND recipient = $2",
		identity, recipient).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("postgres: service window: %w", err)
	}
	return at.UTC(), nil
}

// WebhookStats returns the evidence figures, of one moment.
func (s *Store) WebhookStats(ctx context.Context) (*store.WebhookStats, error) {
	var st store.Stats
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		counters, err := readCounters(ctx, tx)
		if err != nil {
			return fmt.Errorf("postgres: webhook stats: %w", err)
		}
		st.VitalStats.MaybeSent = map[string]int{}
		rules.SetCounters(&st, counters)
		return webhookStats(ctx, tx, &st.WebhookStats)
	})
	if err != nil {
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
	err := q.QueryRow(ctx, "SELECT "+
		"(SELECT count(*) FROM webhook_events WHERE processed_at IS NULL), "+
		"(SELECT count(*) FROM template_holds WHERE status IN ('PAUSED', 'DISABLED', 'REJECTED')), "+
		"(SELECT count(*) FROM messages WHERE state = 'queued' AND substr(last_error, 1, 15) = 'template hold: ')").
		Scan(&st.UnprocessedWebhooks, &st.TemplateHolds, &st.TemplateHeldRows)
	if err != nil {
		return fmt.Errorf("postgres: webhook stats: %w", err)
	}
	return nil
}

// Retention's predicates, each the literal WHERE of its partial index
// (webhook_events_done, inbound_text) and a bound, so that the planner
// can prove the index applies to any plan of the statements, generic ones
// included.
const (
	purgeEventsWhere  = "processed_at IS NOT NULL AND error = '' AND received_at < $1"
	purgeInboundWhere = "(text <> '' OR reply_title <> '') AND stored_at < $1"
)

// Each batch is one statement, so one short transaction of at most $2
// rows, oldest first along the partial index. SKIP LOCKED leaves rows an
// ingest or an apply holds to the next run rather than waiting for them.
// The ids go through ARRAY(...) so that the outer statement looks each
// one up by primary key: with "id IN (subquery)" a generic plan, which
// cannot see the limit, hash-joins against a scan of the whole table.
const (
	purgeEventsSQL = "DELETE FROM webhook_events WHERE id = ANY(ARRAY(SELECT id FROM webhook_events WHERE " +
		purgeEventsWhere + " ORDER BY received_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))"
	purgeInboundSQL = "UPDATE inbound SET text = '', reply_title = '' WHERE id = ANY(ARRAY(SELECT id FROM inbound WHERE " +
		purgeInboundWhere + " ORDER BY stored_at, id LIMIT $2 FOR UPDATE SKIP LOCKED))"
)

// WebhookPurge deletes old events read without an error and blanks the
// texts of old inbound messages, in batches (p.Tenant and p.Purpose do not
// apply: webhooks have neither).
func (s *Store) WebhookPurge(ctx context.Context, p *store.PurgeParams) (*store.WebhookPurged, error) {
	before := p.Before.UTC()
	res := &store.WebhookPurged{}
	if p.DryRun {
		// One statement: both counts of one snapshot.
		err := s.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM webhook_events WHERE "+purgeEventsWhere+"), "+
			"(SELECT count(*) FROM inbound WHERE "+purgeInboundWhere+")", before).Scan(&res.Events, &res.Inbound)
		if err != nil {
			return nil, fmt.Errorf("postgres: webhook purge: %w", err)
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
			tag, err := s.pool.Exec(ctx, b.q, before, purgeBatch)
			if err != nil {
				// What earlier batches did is committed: say so.
				return res, fmt.Errorf("postgres: webhook purge %s: %w", b.what, err)
			}
			n := int(tag.RowsAffected())
			*b.n += n
			if n < purgeBatch {
				break
			}
		}
	}
	return res, nil
}
