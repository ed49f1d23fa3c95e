package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/rules"
)

// insertChunk is the number of rows one multi-row INSERT carries: 14
// parameters a row keeps a full chunk far below SQLite's 32,766 limit while
// amortising the statement's per-execution cost.
const insertChunk = 256

const messageCols = `id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
	payload, state, reason, attempts, next_attempt_at, expires_at, lease_owner, lease_until,
	provider_id, last_error, resend_of, resolution, created_at, updated_at, maybe_sent`

// insertCols are the columns an enqueue sets; the rest take their defaults.
const insertCols = `id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
	payload, state, next_attempt_at, expires_at, resend_of, created_at, updated_at`

const insertColN = 17

const historyCols = `message_id, from_state, to_state, reason, event, applied, source, detail, at`

// historyInsertCols adds the per-message sequence number.
const historyInsertCols = historyCols + `, seq`

const historyColN = 10

func placeholders(rows, cols int) string {
	one := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	return strings.TrimSuffix(strings.Repeat(one+",", rows), ",")
}

// chunkSizes splits n rows into multi-row INSERTs: full chunks of
// insertChunk, then the rest in falling powers of two (37 = 32+4+1), so
// that at most log2(insertChunk)+1 statement shapes exist and each is
// prepared once rather than in every transaction.
func chunkSizes(n int) []int {
	var out []int
	for ; n >= insertChunk; n -= insertChunk {
		out = append(out, insertChunk)
	}
	for c := insertChunk / 2; c > 0; c /= 2 {
		if n >= c {
			out = append(out, c)
			n -= c
		}
	}
	return out
}

// chunkStarts yields each chunk's first row and its size.
func chunkStarts(sizes []int) func(yield func(int, int) bool) {
	return func(yield func(int, int) bool) {
		start := 0
		for _, n := range sizes {
			if !yield(start, n) {
				return
			}
			start += n
		}
	}
}

func insertMessagesSQL(n int) string {
	return "INSERT INTO messages (" + insertCols + ") VALUES " + placeholders(n, insertColN) +
		" ON CONFLICT (tenant, key) DO NOTHING RETURNING id"
}

func insertHistorySQL(n int) string {
	return "INSERT INTO history (" + historyInsertCols + ") VALUES " + placeholders(n, historyColN)
}

// MessageEnqueue creates one row or finds its replay.
func (s *Store) MessageEnqueue(ctx context.Context, p *store.EnqueueParams) (*store.EnqueueResult, error) {
	return rules.One(s.MessageEnqueueMany(ctx, []store.EnqueueParams{*p}))
}

// MessageEnqueueMany writes a batch: the use case is rules.EnqueueMany's,
// this store's statements enqueuer's.
func (s *Store) MessageEnqueueMany(ctx context.Context, ps []store.EnqueueParams) ([]store.EnqueueResult, error) {
	return rules.EnqueueMany(ctx, enqueuer{s}, ps)
}

// enqueuer is the store as rules.EnqueueDriver.
type enqueuer struct{ s *Store }

func (e enqueuer) EnqueueClock(context.Context) (time.Time, error) { return e.s.clock(), nil }
func (e enqueuer) NewID(now time.Time) string                      { return e.s.ids.New(now) }

// InsertFresh: SQLite has no one-row statement of its own; a one-row
// batch takes the transaction, whose BEGIN and COMMIT cost no round trip.
func (enqueuer) InsertFresh(context.Context, *store.Message, time.Time) (bool, error) {
	return false, nil
}

// EnqueueTx prepares the statements of every chunk size n rows need
// (chunkSizes: powers of two up to insertChunk), once per store, before
// the transaction takes the single writer connection: preparing a
// statement of an odd size inside each transaction was most of the group
// commit's CPU (SQL parsing) under load.
func (e enqueuer) EnqueueTx(ctx context.Context, n int, fn func(rules.EnqueueTx) error) error {
	for _, size := range chunkSizes(n) {
		for _, q := range []string{insertMessagesSQL(size), insertHistorySQL(size)} {
			if _, err := e.s.stmt(ctx, q); err != nil {
				return fmt.Errorf("sqlite: enqueue: %w", err)
			}
		}
	}
	return e.s.writeTx(ctx, "enqueue", func(tx *sql.Tx) error { return fn(enqueueTx{e.s, tx}) })
}

// writeTx runs fn in one write transaction (the single writer), committed
// when fn returns nil and rolled back otherwise; fn's error is returned as
// it is. what names the operation in the errors of the transaction itself.
func (s *Store) writeTx(ctx context.Context, what string, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: %s: %w", what, err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: %s: commit: %w", what, err)
	}
	return nil
}

// enqueueTx is an enqueue's write transaction as rules.EnqueueTx.
type enqueueTx struct {
	s  *Store
	tx *sql.Tx
}

// InsertNew writes the rows in chunks (INSERT ... ON CONFLICT DO NOTHING
// RETURNING id: the unique index decides), then the new rows' first
// history entries.
func (e enqueueTx) InsertNew(ctx context.Context, rows []rules.Pending, now time.Time) (map[string]bool, error) {
	inserted := make(map[string]bool, len(rows))
	for start, n := range chunkStarts(chunkSizes(len(rows))) {
		chunk := rows[start : start+n]
		args := make([]any, 0, len(chunk)*insertColN)
		for _, r := range chunk {
			m := r.Msg
			payload, _ := json.Marshal(m.Payload)
			var exp time.Time
			if m.ExpiresAt != nil {
				exp = *m.ExpiresAt
			}
			args = append(args, m.ID, m.Tenant, m.Key, m.BodyHash, m.To, m.Channel, m.Identity,
				m.Purpose, m.TriggerRef, m.Lane, string(payload), string(m.State),
				micros(m.NextAttemptAt), nullMicros(exp), m.ResendOf, micros(now), micros(now))
		}
		st, err := e.s.txStmt(ctx, e.tx, insertMessagesSQL(len(chunk)))
		if err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
		rs, err := st.QueryContext(ctx, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: enqueue: %w", err)
			}
			inserted[id] = true
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
	}
	var fresh []*store.Message
	for _, r := range rows {
		if inserted[r.Msg.ID] {
			fresh = append(fresh, r.Msg)
		}
	}
	return inserted, e.s.insertCreationHistory(ctx, e.tx, fresh, now)
}

func (e enqueueTx) FindKeys(ctx context.Context, rows []rules.Pending) (map[string]*store.Message, error) {
	return e.s.lookupKeys(ctx, e.tx, rows)
}

// LockRevivable reads the rows' facts under the write lock the
// transaction holds: no other writer can have changed them since FindKeys.
func (e enqueueTx) LockRevivable(ctx context.Context, ms []*store.Message, _ map[string]*store.Message) (map[string]rules.Facts, error) {
	return reviveFacts(ctx, e.tx, ms)
}

func (e enqueueTx) Revive(ctx context.Context, vs []rules.Revival) error {
	return writeRevivals(ctx, e.tx, vs)
}

func (e enqueueTx) CountRefused(ctx context.Context, now time.Time, replays, conflicts int) error {
	return countRefusedWrites(ctx, e.tx, now, replays, conflicts)
}

func (s *Store) insertCreationHistory(ctx context.Context, tx *sql.Tx, ms []*store.Message, now time.Time) error {
	for start, n := range chunkStarts(chunkSizes(len(ms))) {
		chunk := ms[start : start+n]
		args := make([]any, 0, len(chunk)*historyColN)
		for _, m := range chunk {
			args = append(args, m.ID, string(state.None), string(m.State), "", string(state.Enqueue), 1,
				store.SourceSend, "", micros(now), 1)
		}
		st, err := s.txStmt(ctx, tx, insertHistorySQL(len(chunk)))
		if err != nil {
			return fmt.Errorf("sqlite: enqueue history: %w", err)
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("sqlite: enqueue history: %w", err)
		}
	}
	return nil
}

// lookupKeys reads the existing rows for the (tenant, key) pairs of ps.
func (s *Store) lookupKeys(ctx context.Context, tx *sql.Tx, ps []rules.Pending) (map[string]*store.Message, error) {
	out := make(map[string]*store.Message, len(ps))
	const chunk = 400
	for start := 0; start < len(ps); start += chunk {
		part := ps[start:min(start+chunk, len(ps))]
		args := make([]any, 0, 2*len(part))
		for _, p := range part {
			args = append(args, p.Msg.Tenant, p.Msg.Key)
		}
		q := "SELECT " + messageCols + " FROM messages WHERE (tenant, key) IN (VALUES " + placeholders(len(part), 2) + ")"
		rs, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: enqueue lookup: %w", err)
		}
		for rs.Next() {
			m, err := scanMessage(rs)
			if err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: enqueue lookup: %w", err)
			}
			out[rules.Key(m.Tenant, m.Key)] = m
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue lookup: %w", err)
		}
	}
	return out, nil
}

// reviveFacts reads, inside the enqueue's write transaction, what
// rules.Settle needs of each row that may revive: whether its recipient
// is opted out of its identity now, and whether any provider call was
// recorded for it.
func reviveFacts(ctx context.Context, tx *sql.Tx, ms []*store.Message) (map[string]rules.Facts, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	out := make(map[string]rules.Facts, len(ms))
	const chunk = 500
	for start := 0; start < len(ms); start += chunk {
		part := ms[start:min(start+chunk, len(ms))]
		args := make([]any, len(part))
		for i, m := range part {
			args[i] = m.ID
		}
		q := "SELECT m.id, EXISTS (SELECT 1 FROM opt_outs o WHERE o.identity = m.identity AND o.recipient = m.recipient AND o.opted_out = 1), " +
			"EXISTS (SELECT 1 FROM attempts a WHERE a.message_id = m.id) FROM messages m WHERE m.id IN (" +
			strings.TrimSuffix(strings.Repeat("?,", len(part)), ",") + ")"
		rs, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlite: enqueue revive check: %w", err)
		}
		for rs.Next() {
			var id string
			var f rules.Facts
			if err := rs.Scan(&id, &f.Holds, &f.Called); err != nil {
				rs.Close()
				return nil, fmt.Errorf("sqlite: enqueue revive check: %w", err)
			}
			out[id] = f
		}
		if err := rs.Close(); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue revive check: %w", err)
		}
	}
	return out, nil
}

// writeRevivals queues the revived rows again, each conditionally on the
// refusal it was decided on, with its history row.
func writeRevivals(ctx context.Context, tx *sql.Tx, vs []rules.Revival) error {
	if len(vs) == 0 {
		return nil
	}
	ts := newTxStmts(tx)
	defer ts.close()
	for _, v := range vs {
		var exp time.Time
		if v.ExpiresAt != nil {
			exp = *v.ExpiresAt
		}
		r, err := ts.exec(ctx, "UPDATE messages SET state = ?, reason = ?, next_attempt_at = ?, expires_at = ?, last_error = '', updated_at = ? "+
			"WHERE id = ? AND state = ? AND reason = ? AND attempts = 0",
			string(v.History.To), string(v.History.Reason), micros(v.NextAt), nullMicros(exp), micros(v.At),
			v.ID, string(v.History.From), string(v.Reason))
		if err != nil {
			return fmt.Errorf("sqlite: enqueue revive: %w", err)
		}
		if n, _ := r.RowsAffected(); n != 1 {
			// The row was read under the write lock: this is a fault.
			return fmt.Errorf("sqlite: enqueue revive: message %s: %d rows changed", v.ID, n)
		}
		if err := keep(ctx, ts, rules.Record{History: v.History}); err != nil {
			return err
		}
	}
	return nil
}

type scanner interface{ Scan(...any) error }

func scanMessage(sc scanner) (*store.Message, error) {
	var (
		m                      store.Message
		payload                sql.NullString
		st, reason             string
		next, created, updated int64
		expires, leaseUntil    sql.NullInt64
	)
	err := sc.Scan(&m.ID, &m.Tenant, &m.Key, &m.BodyHash, &m.To, &m.Channel, &m.Identity, &m.Purpose,
		&m.TriggerRef, &m.Lane, &payload, &st, &reason, &m.Attempts, &next, &expires, &m.LeaseOwner,
		&leaseUntil, &m.ProviderID, &m.LastError, &m.ResendOf, &m.Resolution, &created, &updated, &m.MaybeSent)
	if err != nil {
		return nil, err
	}
	if payload.Valid {
		var p store.Payload
		if err := json.Unmarshal([]byte(payload.String), &p); err != nil {
			return nil, fmt.Errorf("message %s: payload: %w", m.ID, err)
		}
		m.Payload = &p
	}
	m.State, m.Reason = state.State(st), state.Reason(reason)
	m.NextAttemptAt, m.CreatedAt, m.UpdatedAt = fromMicros(next), fromMicros(created), fromMicros(updated)
	m.ExpiresAt, m.LeaseUntil = fromNullMicros(expires), fromNullMicros(leaseUntil)
	return &m, nil
}

// MessageGet finds a row by id, or else by key within tenant.
func (s *Store) MessageGet(ctx context.Context, tenant, ref string) (*store.Message, error) {
	if tenant == "" {
		tenant = store.DefaultTenant
	}
	m, err := s.getOne(ctx, s.r, "SELECT "+messageCols+" FROM messages WHERE id = ? AND tenant = ?", ref, tenant)
	if errors.Is(err, store.ErrNotFound) {
		m, err = s.getOne(ctx, s.r, "SELECT "+messageCols+" FROM messages WHERE tenant = ? AND key = ?", tenant, ref)
	}
	return m, err
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

func (s *Store) getOne(ctx context.Context, db querier, q string, args ...any) (*store.Message, error) {
	m, err := scanMessage(db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: get message: %w", err)
	}
	return m, nil
}

// listWhere is MessageList's and MessageCount's WHERE clause (with its
// leading " WHERE ", or empty) and arguments.
func listWhere(p *store.ListParams) (string, []any, error) {
	var where []string
	var args []any
	if p.Tenant != "" {
		where, args = append(where, "tenant = ?"), append(args, p.Tenant)
	}
	if p.State != state.None {
		if !p.State.Valid() {
			return "", nil, &store.InvalidError{Field: "state", Msg: fmt.Sprintf("unknown state %q", p.State)}
		}
		where, args = append(where, "state = ?"), append(args, string(p.State))
	}
	if p.To != "" {
		where, args = append(where, "recipient = ?"), append(args, p.To)
	}
	if p.Purpose != "" {
		where, args = append(where, "purpose = ?"), append(args, p.Purpose)
	}
	if p.KeyPrefix != "" {
		// A range, not LIKE: '_' is a key character and a LIKE wildcard.
		// Keys are ASCII below 0x7f, so prefix+"\x7f" bounds every key
		// that starts with prefix.
		where, args = append(where, "key >= ? AND key < ?"), append(args, p.KeyPrefix, p.KeyPrefix+"\x7f")
	}
	if p.ResendOf != "" {
		where, args = append(where, "resend_of = ?"), append(args, p.ResendOf)
	}
	if !p.Since.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, micros(p.Since))
	}
	if p.Before != "" {
		where, args = append(where, "id < ?"), append(args, p.Before)
	}
	if len(where) == 0 {
		return "", args, nil
	}
	return " WHERE " + strings.Join(where, " AND "), args, nil
}

// MessageCount counts matching rows, no further than upTo.
func (s *Store) MessageCount(ctx context.Context, p *store.ListParams, upTo int) (int, error) {
	where, args, err := listWhere(p)
	if err != nil {
		return 0, err
	}
	q := "SELECT count(*) FROM (SELECT 1 FROM messages" + where
	if upTo > 0 {
		q += " LIMIT ?"
		args = append(args, upTo)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, q+")", args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count: %w", err)
	}
	return n, nil
}

// MessageList returns filtered rows, newest first.
func (s *Store) MessageList(ctx context.Context, p *store.ListParams) ([]store.Message, error) {
	where, args, err := listWhere(p)
	if err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit <= 0 {
		limit = store.DefaultListLimit
	}
	q := "SELECT " + messageCols + " FROM messages" + where
	// ids are ULIDs on the store's clock: the primary key is creation order.
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rs, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	defer rs.Close()
	out := []store.Message{}
	for rs.Next() {
		m, err := scanMessage(rs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list: %w", err)
		}
		out = append(out, *m)
	}
	return out, rs.Err()
}

// MessageHistory returns a row's state changes, oldest first.
func (s *Store) MessageHistory(ctx context.Context, id string) ([]store.HistoryEntry, error) {
	rs, err := s.r.QueryContext(ctx, "SELECT "+historyCols+" FROM history WHERE message_id = ? ORDER BY seq", id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: history: %w", err)
	}
	defer rs.Close()
	out := []store.HistoryEntry{}
	for rs.Next() {
		var h store.HistoryEntry
		var from, to, reason string
		var at int64
		if err := rs.Scan(&h.MessageID, &from, &to, &reason, &h.Event, &h.Applied, &h.Source, &h.Detail, &at); err != nil {
			return nil, fmt.Errorf("sqlite: history: %w", err)
		}
		h.From, h.To, h.Reason, h.At = state.State(from), state.State(to), state.Reason(reason), fromMicros(at)
		out = append(out, h)
	}
	return out, rs.Err()
}

const attemptCols = `message_id, number, started_at, finished_at, class, http_status, provider_code,
	provider_subcode, raw_error, latency_us`

// MessageAttempts returns a row's provider calls, oldest first.
func (s *Store) MessageAttempts(ctx context.Context, id string) ([]store.Attempt, error) {
	rs, err := s.r.QueryContext(ctx, "SELECT "+attemptCols+" FROM attempts WHERE message_id = ? ORDER BY seq", id)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempts: %w", err)
	}
	defer rs.Close()
	out := []store.Attempt{}
	for rs.Next() {
		var a store.Attempt
		var started, finished, latency int64
		if err := rs.Scan(&a.MessageID, &a.Number, &started, &finished, &a.Class, &a.HTTPStatus,
			&a.ProviderCode, &a.ProviderSubcode, &a.RawError, &latency); err != nil {
			return nil, fmt.Errorf("sqlite: attempts: %w", err)
		}
		a.StartedAt, a.FinishedAt = fromMicros(started), fromMicros(finished)
		a.Latency = time.Duration(latency) * time.Microsecond
		out = append(out, a)
	}
	return out, rs.Err()
}

// MessageTransition applies one event through the state machine,
// conditionally on the state (and lease) the caller read.
func (s *Store) MessageTransition(ctx context.Context, p *store.TransitionParams) (*store.Message, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: transition: %w", err)
	}
	defer tx.Rollback()
	ts := newTxStmts(tx)
	defer ts.close()
	if _, err := s.applyTransition(ctx, ts, p); err != nil {
		if p.KeepIfStale && errors.Is(err, store.ErrStale) {
			// The evidence of the stale transition is written: keep it.
			if cerr := tx.Commit(); cerr != nil {
				return nil, fmt.Errorf("sqlite: transition: commit: %w", cerr)
			}
		}
		return nil, err
	}
	m, err := s.getOne(ctx, tx, "SELECT "+messageCols+" FROM messages WHERE id = ?", p.ID)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: transition: commit: %w", err)
	}
	return m, nil
}

// MessageTransitionMany applies several transitions in one transaction:
// one fsync for a batch of outcomes.
func (s *Store) MessageTransitionMany(ctx context.Context, ps []store.TransitionParams) ([]store.TransitionResult, error) {
	out := make([]store.TransitionResult, len(ps))
	if len(ps) == 0 {
		return out, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: transition: %w", err)
	}
	defer tx.Rollback()
	ts := newTxStmts(tx)
	defer ts.close()
	for i := range ps {
		res, err := s.applyTransition(ctx, ts, &ps[i])
		switch {
		case err == nil:
			out[i].State = res.To
		case store.IsItemError(err):
			out[i].Err = err
		default:
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite: transition: commit: %w", err)
	}
	return out, nil
}

// applyTransition checks and writes one transition inside tx. Its errors
// are either the item's own (store.IsItemError: nothing of it was
// written) or the database's.
func (s *Store) applyTransition(ctx context.Context, tx *txStmts, p *store.TransitionParams) (state.Result, error) {
	res, err := rules.Machine(p)
	if err != nil {
		return res, err
	}
	var (
		cur        string
		leaseOwner string
		leaseUntil sql.NullInt64
	)
	row, err := tx.queryRow(ctx, "SELECT state, lease_owner, lease_until FROM messages WHERE id = ?", p.ID)
	if err != nil {
		return res, fmt.Errorf("sqlite: transition: %w", err)
	}
	err = row.Scan(&cur, &leaseOwner, &leaseUntil)
	if errors.Is(err, sql.ErrNoRows) {
		return res, store.ErrNotFound
	}
	if err != nil {
		return res, fmt.Errorf("sqlite: transition: %w", err)
	}
	r := rules.Row{State: state.State(cur), LeaseOwner: leaseOwner, LeaseUntil: fromNullMicros(leaseUntil)}
	res, now, err := rules.Check(p, r, s.clock())
	if err != nil {
		if p.KeepIfStale && errors.Is(err, store.ErrStale) {
			if err := keep(ctx, tx, rules.Kept(p, r, now)); err != nil {
				return res, err
			}
		}
		return res, err
	}
	return res, writeTransition(ctx, tx, rules.Plan(p, res, now))
}

// writeTransition applies w: the conditional update, its history row and
// its attempt.
func writeTransition(ctx context.Context, tx *txStmts, w rules.Write) error {
	set := []string{"updated_at = ?"}
	args := []any{micros(w.At)}
	if w.Applied {
		set = append(set, "state = ?", "reason = ?")
		args = append(args, string(w.State), string(w.Reason))
	}
	if w.ClearLease {
		set = append(set, "lease_owner = ''", "lease_until = NULL")
	}
	if w.Next {
		set, args = append(set, "next_attempt_at = ?"), append(args, micros(w.NextAt))
	}
	if w.ProviderID != "" {
		// A provider id another row of the identity has already (a
		// provider that issued it twice) must not refuse the record of
		// an accepted send: both rows are marked as a collision instead
		// (see migration 0008), and evidence naming it is set aside.
		set, args = append(set, "provider_id = ?", "provider_id_collision = CASE WHEN EXISTS (SELECT 1 FROM messages y "+
			"WHERE y.identity = messages.identity AND y.provider_id = ? AND y.provider_id <> '' AND y.id <> messages.id) THEN id ELSE '' END"),
			append(args, w.ProviderID, w.ProviderID)
	}
	if w.MaybeSent {
		set = append(set, "maybe_sent = 1")
	}
	if w.NoCall {
		set = append(set, "attempts = max(attempts - 1, 0)")
	}
	if w.LastError != "" {
		set, args = append(set, "last_error = ?"), append(args, w.LastError)
	}
	if w.Resolution != "" {
		set, args = append(set, "resolution = ?"), append(args, w.Resolution)
	}
	q := "UPDATE messages SET " + strings.Join(set, ", ") + " WHERE id = ? AND state = ?"
	args = append(args, w.ID, string(w.From))
	if w.LeaseOwner != "" {
		q += " AND lease_owner = ?"
		args = append(args, w.LeaseOwner)
		if !w.LeaseUntil.IsZero() {
			q += " AND lease_until = ?"
			args = append(args, micros(w.LeaseUntil))
		}
	}
	r, err := tx.exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("sqlite: transition: %w", err)
	}
	if n, _ := r.RowsAffected(); n != 1 {
		// Under the write lock the row cannot have moved since the read;
		// this is a database fault, not a lost race.
		return fmt.Errorf("sqlite: transition: message %s: %d rows changed", w.ID, n)
	}
	if w.ProviderID != "" {
		if _, err := tx.exec(ctx, "UPDATE messages SET provider_id_collision = id WHERE provider_id = ? AND provider_id <> '' "+
			"AND provider_id_collision = '' AND identity = (SELECT identity FROM messages WHERE id = ?) AND id <> ?",
			w.ProviderID, w.ID, w.ID); err != nil {
			return fmt.Errorf("sqlite: transition: mark provider id collision: %w", err)
		}
	}
	return keep(ctx, tx, w.Record)
}

// keep writes a transition's history row and, when it has one, its
// attempt row.
func keep(ctx context.Context, tx *txStmts, rec rules.Record) error {
	h, a := rec.History, rec.Attempt
	if _, err := tx.exec(ctx, "INSERT INTO history ("+historyInsertCols+") SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, "+
		"coalesce(max(seq), 0) + 1 FROM history WHERE message_id = ?",
		h.MessageID, string(h.From), string(h.To), string(h.Reason), h.Event, h.Applied, h.Source, h.Detail, micros(h.At), h.MessageID); err != nil {
		return fmt.Errorf("sqlite: transition history: %w", err)
	}
	if a == nil {
		return nil
	}
	if _, err := tx.exec(ctx, "INSERT INTO attempts ("+attemptCols+") VALUES "+placeholders(1, 10),
		a.MessageID, a.Number, micros(a.StartedAt), micros(a.FinishedAt), a.Class, a.HTTPStatus, a.ProviderCode,
		a.ProviderSubcode, a.RawError, a.Latency.Microseconds()); err != nil {
		return fmt.Errorf("sqlite: transition attempt: %w", err)
	}
	return nil
}

// txStmts prepares each distinct statement once per transaction: a batch of
// outcomes runs the same few statements many times, and preparing is most
// of an execution's cost.
type txStmts struct {
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func newTxStmts(tx *sql.Tx) *txStmts { return &txStmts{tx: tx, stmts: map[string]*sql.Stmt{}} }

func (t *txStmts) prepare(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := t.stmts[q]; ok {
		return st, nil
	}
	st, err := t.tx.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	t.stmts[q] = st
	return st, nil
}

func (t *txStmts) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.prepare(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (t *txStmts) queryRow(ctx context.Context, q string, args ...any) (*sql.Row, error) {
	st, err := t.prepare(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(ctx, args...), nil
}

func (t *txStmts) close() {
	for _, st := range t.stmts {
		st.Close()
	}
}

// EnqueueDriver is the store's enqueue statements, for the driver suite
// (storetest) and any use case written above the store.
func (s *Store) EnqueueDriver() rules.EnqueueDriver { return enqueuer{s} }
