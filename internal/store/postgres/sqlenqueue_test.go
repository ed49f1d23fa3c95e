package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// sqlApp is an application's own connection: the server's default
// search_path, so enqueue() is called schema-qualified, as documented.
type sqlApp struct {
	conn   *pgx.Conn
	schema string
}

func newSQLApp(t *testing.T) (*handle, *sqlApp) {
	t.Helper()
	url := testURL(t)
	schema := freshSchema(t, url)
	h := open(t, url, schema, Options{})
	if err := h.SQLIdentitiesRecord(context.Background(), []store.SQLIdentity{{Name: "sim", Default: true}, {Name: "mail"}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return h, &sqlApp{conn, schema}
}

// enqueue calls enqueue(args) in q (the app's connection or a transaction
// of it); args are "name => value" pairs, values as SQL parameters.
func (a *sqlApp) enqueue(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, args ...any) (string, error) {
	var named []string
	var vals []any
	for i := 0; i < len(args); i += 2 {
		vals = append(vals, args[i+1])
		named = append(named, fmt.Sprintf("%s => $%d", args[i], len(vals)))
	}
	var id string
	err := q.QueryRow(ctx, fmt.Sprintf("SELECT %s.enqueue(%s)", pgx.Identifier{a.schema}.Sanitize(), strings.Join(named, ", ")), vals...).Scan(&id)
	return id, err
}

func count(t *testing.T, h *handle, table string) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// admitted is the decision the Go admission makes of the tests' send
// (storetest.Params' template to +15551234567 from sim): what queues it.
func admitted(id, key string) store.IntakeDecision {
	p := storetest.Params(key)
	p.Tenant = store.DefaultTenant
	return store.IntakeDecision{ID: id, Params: &p}
}

// TestSQLEnqueueTakesInIffTheTransactionCommits: a committed enqueue() is
// a row in intake (its input as given, a take_in history row, drains woken
// at commit) that no drain claims until the admission queues it; a
// rolled-back one leaves nothing.
func TestSQLEnqueueTakesInIffTheTransactionCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	wake, err := h.Enqueued(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := app.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := app.enqueue(ctx, tx, "key", "order-1001", "to_addr", "+1 (555) 123-4567", "template", "order_update",
		"params", []string{"Ada", "1001 <&>"}, "purpose", "shipping", "ref", "order:1001", "expires_in", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.MessageGet(ctx, "", id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("before commit the row is visible to others: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitWake(t, wake, "after the application's transaction committed")
	m, err := h.MessageGet(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != state.Intake || m.Key != "order-1001" || m.Tenant != store.DefaultTenant || m.Identity != "sim" ||
		m.To != "+1 (555) 123-4567" || m.Purpose != "shipping" || m.TriggerRef != "order:1001" || m.Lane != store.LaneBulk ||
		m.ExpiresAt == nil || m.ExpiresAt.Sub(m.CreatedAt) != 2*time.Hour {
		t.Fatalf("taken in: %+v", m)
	}
	hs, err := h.MessageHistory(ctx, id)
	if err != nil || len(hs) != 1 || hs[0].From != state.None || hs[0].To != state.Intake || hs[0].Event != "take_in" || hs[0].Source != store.SourceSQL {
		t.Fatalf("history %+v, %v; want one take_in from sql", hs, err)
	}
	if cl, err := h.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10}); err != nil || len(cl) != 0 {
		t.Fatalf("a drain claimed %d intake rows (%v); want none", len(cl), err)
	}
	if st, err := h.Stats(ctx, &store.StatsParams{}); err != nil || st.OldestIntake == nil || !st.OldestIntake.Equal(m.CreatedAt) {
		t.Fatalf("stats' oldest intake %v, %v; want the row's %v", st.OldestIntake, err, m.CreatedAt)
	}

	rows, err := h.IntakeList(ctx, []string{"sim", "mail"}, 10)
	if err != nil || len(rows) != 1 || rows[0].ID != id || rows[0].Identity != "sim" {
		t.Fatalf("intake list %+v, %v", rows, err)
	}
	var input map[string]any
	if err := json.Unmarshal(rows[0].Input, &input); err != nil {
		t.Fatal(err)
	}
	if input["to"] != "+1 (555) 123-4567" || input["template"] != "order_update" || input["lang"] != "en" ||
		fmt.Sprint(input["params"]) != "[Ada 1001 <&>]" || input["purpose"] != "shipping" || input["ref"] != "order:1001" || input["lane"] != "bulk" {
		t.Fatalf("the input recorded: %s", rows[0].Input)
	}
	exp, err := time.Parse(time.RFC3339, fmt.Sprint(input["expires_at"]))
	if err != nil || !exp.Equal(*m.ExpiresAt) {
		t.Fatalf("expires_at in the input %v (%v); want the row's %v", input["expires_at"], err, m.ExpiresAt)
	}
	if other, err := h.IntakeList(ctx, []string{"mail"}, 10); err != nil || len(other) != 0 {
		t.Fatalf("another identity's admission listed %+v, %v", other, err)
	}

	d := admitted(id, "order-1001")
	d.Params.Payload.Params = []string{"Ada", "1001 <&>"}
	d.Params.Purpose, d.Params.TriggerRef, d.Params.ExpiresAt = "shipping", "order:1001", *m.ExpiresAt
	res, err := h.IntakeDecide(ctx, []store.IntakeDecision{d})
	if err != nil || res != (store.IntakeResult{Admitted: 1}) {
		t.Fatalf("admit: %+v, %v", res, err)
	}
	waitWake(t, wake, "after the admission queued the row")
	m, err = h.MessageGet(ctx, "", id)
	if err != nil || m.State != state.Queued || m.To != "+15551234567" || m.BodyHash != d.Params.BodyHash() || m.Payload.Params[1] != "1001 <&>" {
		t.Fatalf("admitted: %+v, %v", m, err)
	}
	hs, err = h.MessageHistory(ctx, id)
	if err != nil || len(hs) != 2 || hs[1].From != state.Intake || hs[1].To != state.Queued || hs[1].Event != "admit" || hs[1].Source != store.SourceAdmission {
		t.Fatalf("history %+v, %v; want take_in then admit", hs, err)
	}
	if st, err := h.Stats(ctx, &store.StatsParams{}); err != nil || st.OldestIntake != nil {
		t.Fatalf("stats' oldest intake once admitted: %v, %v; want none", st.OldestIntake, err)
	}
	if cl, err := h.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10}); err != nil || len(cl) != 1 || cl[0].ID != id {
		t.Fatalf("a drain claimed %+v (%v); want the admitted row", cl, err)
	}

	tx, err = app.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := app.enqueue(ctx, tx, "key", "order-1002", "to_addr", "+15551234567", "text", "never sent")
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.MessageGet(ctx, "", gone); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a rolled-back enqueue left message %s: %v", gone, err)
	}
}

// TestSQLEnqueueReplaysAndConflicts: the same call (the same content:
// purpose, ref, lane and timing are not content) is the existing id before
// and after the admission; other content, or the same send written
// another way, raises MQ409 with the existing id as DETAIL and writes
// nothing. msgq send of the key is a conflict while the row waits in
// intake and a replay once it is admitted as the same send.
func TestSQLEnqueueReplaysAndConflicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	call := []any{"key", "k1", "to_addr", "+15551234567", "template", "order_update", "params", []string{"Ada", "1001"}}
	first, err := app.enqueue(ctx, app.conn, call...)
	if err != nil {
		t.Fatal(err)
	}
	again, err := app.enqueue(ctx, app.conn, append(call, "purpose", "not content", "lane", "reply", "lang", "en", "not_before_in", time.Minute)...)
	if err != nil || again != first {
		t.Fatalf("replay: %q, %v; want %s", again, err, first)
	}
	// A NULL parameter is an empty one, in the digest as at the admission.
	nulls, err := app.enqueue(ctx, app.conn, "key", "k-null", "to_addr", "+15551234567", "template", "t", "params", []*string{nil})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := app.enqueue(ctx, app.conn, "key", "k-null", "to_addr", "+15551234567", "template", "t", "params", []string{""}); err != nil || again != nulls {
		t.Fatalf("ARRAY[''] after ARRAY[NULL]: %q, %v; want a replay of %s", again, err, nulls)
	}
	p := storetest.Params("k1")
	if _, err := h.MessageEnqueue(ctx, &p); !errors.As(err, new(*store.ConflictError)) {
		t.Fatalf("msgq send of the key while it waits in intake: %v; want a conflict", err)
	}
	if res, err := h.IntakeDecide(ctx, []store.IntakeDecision{admitted(first, "k1")}); err != nil || res.Admitted != 1 {
		t.Fatalf("admit: %+v, %v", res, err)
	}
	if again, err = app.enqueue(ctx, app.conn, call...); err != nil || again != first {
		t.Fatalf("replay after the admission: %q, %v; want %s", again, err, first)
	}
	res, err := h.MessageEnqueue(ctx, &p)
	if err != nil || !res.Replayed || res.Message.ID != first {
		t.Fatalf("msgq send of the same send once admitted: %+v, %v; want a replay of %s", res, err, first)
	}
	messages, history := count(t, h, "messages"), count(t, h, "history")
	for _, other := range [][]any{
		{"key", "k1", "to_addr", "+15551234567", "text", "other content"},
		{"key", "k1", "to_addr", "+1 555 123 4567", "template", "order_update", "params", []string{"Ada", "1001"}},
		{"key", "k1", "to_addr", "+15551234567", "template", "order_update", "params", []string{"Ada", "1002"}},
	} {
		_, err = app.enqueue(ctx, app.conn, other...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "MQ409" || pe.Detail != first || pe.ColumnName != "key" || !strings.Contains(pe.Message, first) {
			t.Fatalf("%v: %v (%+v); want SQLSTATE MQ409 with DETAIL %s", other, err, pe, first)
		}
	}
	// A key msgq send wrote: a replay when the call gives the content as
	// stored (the number in E.164), a conflict when it writes it another
	// way (enqueue() reads no number).
	p2 := storetest.Params("k2")
	r2, err := h.MessageEnqueue(ctx, &p2)
	if err != nil {
		t.Fatal(err)
	}
	messages++
	history++
	if id, err := app.enqueue(ctx, app.conn, "key", "k2", "to_addr", "+15551234567", "template", "order_update", "params", []string{"Ada", "1001"}); err != nil || id != r2.Message.ID {
		t.Fatalf("enqueue() of a send msgq send wrote, as stored: %q, %v; want a replay of %s", id, err, r2.Message.ID)
	}
	for _, other := range [][]any{
		{"key", "k2", "to_addr", "+1 555 123 4567", "template", "order_update", "params", []string{"Ada", "1001"}},
		{"key", "k2", "to_addr", "+15551234567", "template", "order_update", "params", []string{"Ada", "1002"}},
		{"key", "k2", "to_addr", "+15551234567", "channel", "sms", "template", "order_update", "params", []string{"Ada", "1001"}},
	} {
		if _, err := app.enqueue(ctx, app.conn, other...); !isCode(err, "MQ409") {
			t.Fatalf("%v of a key msgq send wrote: %v; want MQ409", other, err)
		}
	}
	if m, h2 := count(t, h, "messages"), count(t, h, "history"); m != messages || h2 != history {
		t.Fatalf("conflicts wrote rows: messages %d -> %d, history %d -> %d", messages, m, history, h2)
	}
	var replays int64
	if err := h.pool.QueryRow(ctx, "SELECT coalesce(sum(n), 0)::bigint FROM counters WHERE name = $1", store.CounterKeyReplays).Scan(&replays); err != nil || replays < 3 {
		t.Fatalf("key replays counted %d, %v; want the three", replays, err)
	}
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// TestSQLEnqueueRefusesWhatItCanCheckExactly: the cheap exact checks raise
// MQ422 naming the field (in the message and as the error's column) and
// write nothing; what needs the admission (a number, an address, a
// channel, segments, quiet hours) is taken in, to be decided there.
func TestSQLEnqueueRefusesWhatItCanCheckExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	ok := []any{"to_addr", "+15551234567", "text", "hi"}
	cases := []struct {
		name, field string
		args        []any
	}{
		{"no key", "key", append([]any{"key", ""}, ok...)},
		{"a key outside the grammar", "key", append([]any{"key", "order 1001"}, ok...)},
		{"a key too long", "key", append([]any{"key", strings.Repeat("k", 65)}, ok...)},
		{"no address", "to", []any{"key", "k", "to_addr", "", "text", "hi"}},
		{"an unknown identity", "identity", append([]any{"key", "k", "identity", "nobody"}, ok...)},
		{"text and a template", "text", []any{"key", "k", "to_addr", "+15551234567", "text", "hi", "template", "t"}},
		{"neither text nor template", "payload", []any{"key", "k", "to_addr", "+15551234567"}},
		{"a bad lane", "lane", append([]any{"key", "k", "lane", "fast"}, ok...)},
		{"a bad tenant", "tenant", append([]any{"key", "k", "tenant", "a b"}, ok...)},
		{"an expiry in the past", "expires_at", append([]any{"key", "k", "expires_at", time.Now().Add(-time.Hour)}, ok...)},
		{"a negative expires_in", "expires_in", append([]any{"key", "k", "expires_in", -time.Minute}, ok...)},
		{"both expiries", "expires_in", append([]any{"key", "k", "expires_in", time.Minute, "expires_at", time.Now().Add(time.Hour)}, ok...)},
		{"both not_befores", "not_before", append([]any{"key", "k", "not_before_in", time.Minute, "not_before", time.Now().Add(time.Hour)}, ok...)},
		{"an expiry before not_before", "expires_at", append([]any{"key", "k", "not_before_in", time.Hour, "expires_in", time.Minute}, ok...)},
		{"a two-dimensional params", "params", []any{"key", "k", "to_addr", "+15551234567", "template", "t", "params", [][]string{{"a"}, {"b"}}}},
		{"not_before infinity", "not_before", append([]any{"key", "k", "not_before", pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}}, ok...)},
		{"an expiry past the year 9999", "expires_at", append([]any{"key", "k", "expires_at", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, ok...)},
		{"a delay past the year 9999", "not_before", append([]any{"key", "k", "not_before_in", pgtype.Interval{Months: 9000 * 12, Valid: true}}, ok...)},
	}
	for _, c := range cases {
		_, err := app.enqueue(ctx, app.conn, c.args...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "MQ422" || pe.ColumnName != c.field || !strings.HasPrefix(pe.Message, "msgq: "+c.field+" ") {
			t.Errorf("%s: %v; want SQLSTATE MQ422 naming %s", c.name, err, c.field)
		}
	}
	if n := count(t, h, "messages") + count(t, h, "history"); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
	if _, err := h.pool.Exec(ctx, "UPDATE sql_identities SET is_default = false"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.enqueue(ctx, app.conn, append([]any{"key", "k"}, ok...)...); !isCode(err, "MQ422") {
		t.Fatalf("no identity and no default recorded: %v; want MQ422", err)
	}
	for i, deep := range [][]any{
		{"identity", "sim", "to_addr", "+1555", "text", "hi"},
		{"identity", "sim", "to_addr", "555 123 4567", "text", "hi"},
		{"identity", "sim", "channel", "pigeon", "to_addr", "+15551234567", "text", "hi"},
		{"identity", "mail", "to_addr", "ada@localhost", "text", "hi"},
	} {
		id, err := app.enqueue(ctx, app.conn, append([]any{"key", fmt.Sprint("deep-", i)}, deep...)...)
		if err != nil {
			t.Fatalf("%v: %v; want it taken in for the admission", deep, err)
		}
		if m, err := h.MessageGet(ctx, "", id); err != nil || m.State != state.Intake {
			t.Fatalf("%v: %+v, %v; want intake", deep, m, err)
		}
	}
}

// TestIntakeDecisionsAreWrittenOnce: a refusal fails the row as invalid
// with the field error as its last error (and a message.failed event for
// the tenant's endpoint); a deadline past by the store's clock fails it as
// expired; a second decision on a decided row (another process's) is
// skipped, writing nothing.
func TestIntakeDecisionsAreWrittenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	if err := h.EndpointAdd(ctx, &store.Endpoint{ID: "ep_1", Tenant: store.DefaultTenant, URL: "https://hooks.example.com/msgq", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}); err != nil {
		t.Fatal(err)
	}
	bad, err := app.enqueue(ctx, app.conn, "key", "bad", "to_addr", "+1555", "text", "hi")
	if err != nil {
		t.Fatal(err)
	}
	late, err := app.enqueue(ctx, app.conn, "key", "late", "to_addr", "+15551234567", "text", "hi", "expires_in", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	good, err := app.enqueue(ctx, app.conn, "key", "good", "to_addr", "+15551234567", "template", "order_update", "params", []string{"Ada", "1001"})
	if err != nil {
		t.Fatal(err)
	}
	// An operator may cancel a row waiting in intake: nothing of it went
	// out. The admission's decision on it is then skipped.
	canceled, err := app.enqueue(ctx, app.conn, "key", "canceled", "to_addr", "+15551234567", "text", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := h.MessageTransition(ctx, &store.TransitionParams{ID: canceled, From: state.Intake, Event: state.Event{Kind: state.Cancel},
		Source: store.SourceOperator, Detail: "canceled by test"}); err != nil || m.State != state.Failed || m.Reason != state.Canceled {
		t.Fatalf("cancel of an intake row: %+v, %v", m, err)
	}
	why := `to: invalid phone number "+1555": too short`
	pl := storetest.Params("late")
	pl.Tenant, pl.Payload = store.DefaultTenant, store.Payload{Text: "hi"}
	pl.ExpiresAt = time.Now().Add(-time.Second)
	ds := []store.IntakeDecision{{ID: bad, Invalid: why}, {ID: late, Params: &pl}, admitted(good, "good"), {ID: canceled, Invalid: "never written"}}
	res, err := h.IntakeDecide(ctx, ds)
	if err != nil || res != (store.IntakeResult{Admitted: 1, Invalid: 1, Expired: 1, Skipped: 1}) {
		t.Fatalf("decide: %+v, %v", res, err)
	}
	m, err := h.MessageGet(ctx, "", bad)
	if err != nil || m.State != state.Failed || m.Reason != state.Invalid || m.LastError != why {
		t.Fatalf("refused: %+v, %v", m, err)
	}
	if m, err = h.MessageGet(ctx, "", late); err != nil || m.State != state.Failed || m.Reason != state.Expired {
		t.Fatalf("past its deadline: %+v, %v", m, err)
	}
	hs, err := h.MessageHistory(ctx, bad)
	if err != nil || len(hs) != 2 || hs[1].Event != "fail(invalid)" || hs[1].Detail != why || hs[1].Source != store.SourceAdmission {
		t.Fatalf("history of the refused row %+v, %v", hs, err)
	}
	evs, err := h.EventList(ctx, "ep_1", 10)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, e := range evs {
		if e.Type == "message.failed" {
			failed = append(failed, e.Subject)
		}
	}
	if len(failed) != 3 {
		t.Fatalf("message.failed events for %v; want the refused, the expired and the canceled rows", failed)
	}
	messages, history := count(t, h, "messages"), count(t, h, "history")
	res, err = h.IntakeDecide(ctx, ds)
	if err != nil || res != (store.IntakeResult{Skipped: 4}) {
		t.Fatalf("deciding again: %+v, %v; want all four skipped", res, err)
	}
	if m, h2 := count(t, h, "messages"), count(t, h, "history"); m != messages || h2 != history {
		t.Fatalf("a second decision wrote: messages %d -> %d, history %d -> %d", messages, m, history, h2)
	}
}

// TestSQLEnqueueConcurrentSameKey: two applications' transactions enqueue
// one key; the second waits for the first and, once it commits, is its
// replay; had it rolled back, the second's row stands alone.
func TestSQLEnqueueConcurrentSameKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, app := newSQLApp(t)
	other, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(ctx) })
	for _, commitFirst := range []bool{true, false} {
		key := fmt.Sprintf("race-%t", commitFirst)
		tx1, err := app.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, err := app.enqueue(ctx, tx1, "key", key, "to_addr", "+15551234567", "text", "hi")
		if err != nil {
			t.Fatal(err)
		}
		type answer struct {
			id  string
			err error
		}
		second := make(chan answer, 1)
		go func() {
			id, err := app.enqueue(ctx, other, "key", key, "to_addr", "+15551234567", "text", "hi")
			second <- answer{id, err}
		}()
		// The second blocks on the first's uncommitted key until it ends.
		waitLockWait(t, app.conn, other.PgConn().PID())
		if commitFirst {
			err = tx1.Commit(ctx)
		} else {
			err = tx1.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		a := <-second
		switch {
		case a.err != nil:
			t.Fatalf("commit first %t: the second enqueue: %v", commitFirst, a.err)
		case commitFirst && a.id != first:
			t.Fatalf("after the first committed, the second got %s; want its replay %s", a.id, first)
		case !commitFirst && a.id == first:
			t.Fatalf("after the first rolled back, the second got its id %s", a.id)
		}
	}
}

// waitLockWait waits until backend pid waits on a lock (the second
// enqueue on the first's key), with a generous bound against a hang. The
// assertions hold either way; this makes the test race the two.
func waitLockWait(t *testing.T, conn *pgx.Conn, pid uint32) {
	t.Helper()
	for end := time.Now().Add(time.Minute); ; {
		var n int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("the second enqueue never waited for the first")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSQLEnqueueNeedsNoTablePrivileges: enqueue() runs as its owner, so an
// application role with USAGE on the schema (and EXECUTE, every role's
// unless revoked) enqueues, replays and gets MQ409, though it can read no
// table of msgq's: the counts and events its triggers keep are msgq's.
func TestSQLEnqueueNeedsNoTablePrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, app := newSQLApp(t)
	b := make([]byte, 6)
	rand.Read(b)
	role := pgx.Identifier{"msgq_app_" + hex.EncodeToString(b)}.Sanitize()
	if _, err := app.conn.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), h.url)
		if err != nil {
			t.Errorf("drop role: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	if _, err := app.conn.Exec(ctx, "GRANT USAGE ON SCHEMA "+pgx.Identifier{app.schema}.Sanitize()+" TO "+role); err != nil {
		t.Fatal(err)
	}
	if err := h.EndpointAdd(ctx, &store.Endpoint{ID: "ep_1", Tenant: store.DefaultTenant, URL: "https://hooks.example.com/msgq", Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}); err != nil {
		t.Fatal(err)
	}
	as := func(fn func(tx pgx.Tx) error) error {
		tx, err := app.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+role); err != nil {
			t.Fatal(err)
		}
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	var id, again string
	if err := as(func(tx pgx.Tx) error {
		var err error
		if id, err = app.enqueue(ctx, tx, "key", "least", "to_addr", "+15551234567", "text", "hi"); err != nil {
			return err
		}
		again, err = app.enqueue(ctx, tx, "key", "least", "to_addr", "+15551234567", "text", "hi")
		return err
	}); err != nil || again != id {
		t.Fatalf("as a role with USAGE only: %q then %q, %v; want an id and its replay", id, again, err)
	}
	err := as(func(tx pgx.Tx) error {
		_, err := app.enqueue(ctx, tx, "key", "least", "to_addr", "+15551234567", "text", "other")
		return err
	})
	if !isCode(err, "MQ409") {
		t.Fatalf("a conflict as that role: %v; want MQ409", err)
	}
	err = as(func(tx pgx.Tx) error {
		var n int
		return tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{app.schema, "messages"}.Sanitize()).Scan(&n)
	})
	if !isCode(err, "42501") { // insufficient_privilege
		t.Fatalf("the role read msgq's messages table: %v; want permission denied", err)
	}
	if m, err := h.MessageGet(ctx, "", id); err != nil || m.State != state.Intake {
		t.Fatalf("taken in by the role: %+v, %v", m, err)
	}
}
