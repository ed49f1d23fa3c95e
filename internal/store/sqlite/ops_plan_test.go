package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/aged"
	"github.com/msgq/msgq/internal/store/hotpath"
)

// tracer records every statement a store's reader runs, with its
// arguments, so that a test can ask SQLite how it plans the very
// statements the store issued (not a copy of their text that could drift).
type tracer struct {
	mu    sync.Mutex
	stmts []traced
}

type traced struct {
	query string
	args  []any
}

func (t *tracer) record(q string, args []driver.NamedValue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	vs := make([]any, len(args))
	for i, a := range args {
		vs[i] = a.Value
	}
	t.stmts = append(t.stmts, traced{q, vs})
}

func (t *tracer) take() []traced {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.stmts
	t.stmts = nil
	return out
}

// traceConnector opens connections of the registered sqlite driver and
// wraps them in traceConn.
type traceConnector struct {
	dsn string
	d   driver.Driver
	t   *tracer
}

func (c *traceConnector) Connect(context.Context) (driver.Conn, error) {
	cn, err := c.d.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &traceConn{cn, c.t}, nil
}

func (c *traceConnector) Driver() driver.Driver { return c.d }

// traceConn passes everything to the driver's connection, recording
// queries and prepared statements on the way.
type traceConn struct {
	driver.Conn
	t *tracer
}

func (c *traceConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.t.record(q, args)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *traceConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.t.record(q, args)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *traceConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &traceStmt{st, q, c.t}, nil
}

// traceStmt records each execution of a prepared statement, with its
// arguments (the writer prepares the statements it runs often).
type traceStmt struct {
	driver.Stmt
	q string
	t *tracer
}

func (s *traceStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.t.record(s.q, args)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *traceStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.t.record(s.q, args)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (c *traceConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// traceStore replaces s's writer and reader pools by ones that record
// every statement they run (prepared ones at each execution), with the
// same settings (dsns), and returns a reader of its own on which the test
// may run EXPLAIN.
func traceStore(tb testing.TB, s *Store, path string) (*tracer, *sql.DB) {
	tb.Helper()
	t := &tracer{}
	wdsn, rdsn := dsns(path, Options{BusyTimeout: 10 * time.Second})
	s.mu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.mu.Unlock()
	s.w.Close()
	w := sql.OpenDB(&traceConnector{dsn: wdsn, d: s.r.Driver(), t: t})
	w.SetMaxOpenConns(1)
	s.w = w
	orig := s.r
	s.r = sql.OpenDB(&traceConnector{dsn: rdsn, d: orig.Driver(), t: t})
	tb.Cleanup(func() { s.r.Close() })
	return t, orig
}

// bigTables are the tables that grow with the queue: a plan that reads one
// of them whole (or one of their full indexes whole) costs time in
// proportion to every row ever sent or received. The others (state_counts,
// counters, identities, identity_pace, endpoints, api_keys,
// template_holds, counts_by_minute) hold a row per identity, state,
// counter, endpoint, key, template or recent minute.
var bigTables = map[string]bool{"messages": true, "history": true, "attempts": true, "webhook_events": true, "evidence": true,
	"inbound": true, "events": true, "notices": true, "challenges": true, "challenge_steps": true, "recipient_pace": true,
	"daily_recipients": true, "opt_outs": true, "service_windows": true}

// boundedPartial are the partial indexes whose predicate admits only work
// in progress (rows queued or in flight, events and deliveries not yet
// handled, open challenges): a scan of one is bounded by that work. The
// other partial indexes admit classes that only grow (deliveries, resends,
// statuses parked for ever, replies linked to nothing), and a scan of one
// of those is a scan of every such row ever.
var boundedPartial = map[string]bool{"messages_due": true, "messages_in_flight": true, "messages_expiring": true,
	"messages_window_held": true, "messages_template_held": true, "events_due": true, "events_subject": true,
	"webhook_events_pending": true, "challenges_open": true, "endpoints_tenant": true, "api_keys_live_name": true}

var scanLine = regexp.MustCompile(`^SCAN (\w+)(?: AS (\w+))?(?: USING (?:COVERING )?INDEX (\w+))?`)

// fullScans returns the lines of plan that read a big table, or a full
// index of one, from end to end. A scan of a partial index of work in
// progress (boundedPartial) is bounded by that work, and so allowed.
func fullScans(plan []string, aliases map[string]string, partial map[string]bool) []string {
	var bad []string
	for _, line := range plan {
		m := scanLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		table := m[1]
		if t, ok := aliases[table]; ok {
			table = t
		}
		if !bigTables[table] {
			continue
		}
		if idx := m[3]; idx != "" && partial[idx] && boundedPartial[idx] {
			continue
		}
		bad = append(bad, line)
	}
	return bad
}

// aliasOf maps the aliases a statement gives its tables ("history h") to
// the tables.
var aliasOf = regexp.MustCompile(`(?i)\b(messages|history|attempts|webhook_events|evidence|inbound|events|notices|challenges|` +
	`challenge_steps|recipient_pace|daily_recipients|opt_outs|service_windows)\s+(?:AS\s+)?([a-z]\w*)`)

func aliases(q string) map[string]string {
	out := map[string]string{}
	for _, m := range aliasOf.FindAllStringSubmatch(q, -1) {
		switch strings.ToUpper(m[2]) {
		case "WHERE", "INDEXED", "SET", "ORDER", "GROUP", "LIMIT", "ON", "JOIN", "USING", "NOT", "AND", "OR", "VALUES",
			"SELECT", "RETURNING", "LEFT", "CROSS", "INNER", "UNION", "DO", "DEFAULT", "FROM":
			continue
		}
		out[m[2]] = strings.ToLower(m[1])
	}
	return out
}

// explain returns the plan of q with args, one line per step, indented by
// depth.
func explain(tb testing.TB, db *sql.DB, q string, args []any) []string {
	tb.Helper()
	rs, err := db.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		tb.Fatalf("explain %s: %v", q, err)
	}
	defer rs.Close()
	var lines []string
	for rs.Next() {
		var id, parent, notused int
		var detail string
		if err := rs.Scan(&id, &parent, &notused, &detail); err != nil {
			tb.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rs.Err(); err != nil {
		tb.Fatal(err)
	}
	return lines
}

func partialIndexes(tb testing.TB, db *sql.DB) map[string]bool {
	tb.Helper()
	rs, err := db.Query("SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'")
	if err != nil {
		tb.Fatal(err)
	}
	defer rs.Close()
	out := map[string]bool{}
	for rs.Next() {
		var n string
		if err := rs.Scan(&n); err != nil {
			tb.Fatal(err)
		}
		out[n] = true
	}
	return out
}

// TestStatsAndStuckReadOnlyThroughIndexes asks SQLite for the plan of every
// statement Stats, MessageStuck (with each of its filters) and
// MessageProviderIDOwners (reconcile's question for each search) issue, as
// they issued it, and fails on any that reads messages, history or
// attempts whole: those answer in constant time on a queue of any size
// (issue 5: under 200 ms over 1,000,000 rows; BenchmarkOps1M measures it).
// msgq never runs ANALYZE, so these plans are the ones a big store gets.
func TestStatsAndStuckReadOnlyThroughIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "msgq.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// A few rows, so that every statement has something to read.
	for i := range 3 {
		p := store.EnqueueParams{Tenant: store.DefaultTenant, Key: fmt.Sprintf("k%d", i), To: "+15551230000",
			Channel: store.ChannelWhatsApp, Identity: "sim", Lane: store.LaneBulk, Payload: store.Payload{Text: "hi"}}
		if _, err := s.MessageEnqueue(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MessageClaim(ctx, &store.ClaimParams{Owner: "d", LeaseFor: time.Minute, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.IdentityPause(ctx, "other", "test"); err != nil {
		t.Fatal(err)
	}

	tr, db := traceStore(t, s, path)
	partial := partialIndexes(t, db)
	calls := []struct {
		name string
		call func() error
	}{
		{"Stats", func() error { _, err := s.Stats(ctx, &store.StatsParams{}); return err }},
		{"Stats with sent progress", func() error {
			_, err := s.Stats(ctx, &store.StatsParams{ProgressIdentities: []string{"sim", "other"}})
			return err
		}},
		{"MessageStuck", func() error { _, err := s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute}); return err }},
		{"MessageStuck --state unknown", func() error {
			_, err := s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute, State: state.Unknown})
			return err
		}},
		{"MessageStuck lease expired", func() error {
			_, err := s.MessageStuck(ctx, &store.StuckParams{LeaseExpired: true})
			return err
		}},
		{"MessageStuck --identity --purpose --tenant", func() error {
			_, err := s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute, Identity: "sim", Purpose: "otp", Tenant: "default"})
			return err
		}},
		{"MessageProviderIDOwners", func() error {
			_, err := s.MessageProviderIDOwners(ctx, "sim", []string{"SM1", "SM2"})
			return err
		}},
	}
	for _, c := range calls {
		if err := c.call(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		stmts := tr.take()
		if len(stmts) == 0 {
			t.Fatalf("%s ran no statement: the trace no longer sees the store's statements", c.name)
		}
		for _, st := range stmts {
			plan := explain(t, db, st.query, st.args)
			if bad := fullScans(plan, aliases(st.query), partial); len(bad) > 0 {
				t.Errorf("%s: a full scan of a table that grows with the queue: %q\nstatement: %s\nplan:\n  %s",
					c.name, bad, st.query, strings.Join(plan, "\n  "))
			}
			if testing.Verbose() {
				t.Logf("%s: %s\n  %s", c.name, st.query, strings.Join(plan, "\n  "))
			}
		}
	}
}

// TestTheScanCheckCatchesAFullScan keeps the check above honest: the
// plans of statements that do read a table whole must fail it.
func TestTheScanCheckCatchesAFullScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "msgq.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	partial := partialIndexes(t, s.r)
	for _, q := range []string{
		"SELECT count(*) FROM messages WHERE state = 'sending'",
		"SELECT count(*) FROM history h WHERE h.to_state = 'sent'",
		"SELECT class, count(*) FROM attempts a WHERE a.latency_us > 5 GROUP BY class",
		"SELECT count(*) FROM messages INDEXED BY messages_tenant_key WHERE recipient = '+1'",
	} {
		if bad := fullScans(explain(t, s.r, q, nil), aliases(q), partial); len(bad) == 0 {
			t.Errorf("no full scan found in the plan of %s: %q", q, explain(t, s.r, q, nil))
		}
	}
	if !partial["messages_in_flight"] || !partial["messages_due"] || partial["messages_tenant_key"] {
		t.Errorf("partial indexes %v", partial)
	}
}

// TestReleaseHeldSearchesOnlyHeldRows checks the plan of the update an
// inbound message runs on every ingest: it must reach the held rows of
// one identity and recipient through messages_window_held, never read
// messages whole (a busy webhook would then scan the queue per message).
func TestReleaseHeldSearchesOnlyHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	plan := explain(t, s.r, releaseHeldSQL, []any{int64(1), "sim", "+15551230000", int64(1)})
	if bad := fullScans(plan, aliases(releaseHeldSQL), partialIndexes(t, s.r)); len(bad) > 0 ||
		!strings.Contains(strings.Join(plan, "\n"), "INDEX messages_window_held (identity=? AND recipient=?)") {
		t.Errorf("release of held rows does not search messages_window_held by identity and recipient:\n  %s",
			strings.Join(plan, "\n  "))
	}
}

// checkPlans asks SQLite for the plan of each statement, as issued, and
// fails on any that reads a table that grows with the queue whole.
func checkPlans(t *testing.T, db *sql.DB, name string, stmts []traced, partial map[string]bool) {
	t.Helper()
	for _, st := range stmts {
		switch strings.ToUpper(strings.Fields(st.query)[0]) {
		case "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA":
			continue
		}
		plan := explain(t, db, st.query, st.args)
		if bad := fullScans(plan, aliases(st.query), partial); len(bad) > 0 {
			t.Errorf("%s: a full scan of a table that grows with the queue: %q\nstatement: %s\nplan:\n  %s",
				name, bad, st.query, strings.Join(plan, "\n  "))
		}
		if testing.Verbose() {
			t.Logf("%s: %s\n  %s", name, strings.Join(strings.Fields(st.query), " "), strings.Join(plan, "\n  "))
		}
	}
}

// TestHotPathsReachRowsThroughIndexes asks SQLite for the plan of every
// statement, reads and writes, that the hot paths besides the drain issue
// (internal/store/hotpath: a webhook status, single sends, msgq serve's
// group commit, the events dispatcher, reconcile, stuck, stats, health),
// beside an aged store, and fails on any that reads a table that grows
// with the queue (bigTables) whole, or walks one of its indexes whole:
// those would cost in proportion to every row the queue kept. msgq never
// runs ANALYZE, so these plans, made without statistics, are the ones a
// big store gets. The statements of triggers are checked by
// TestTriggersReachRowsThroughIndexes.
func TestHotPathsReachRowsThroughIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "msgq.db")
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const finished = 2000
	wdsn, _ := dsns(path, Options{BusyTimeout: 10 * time.Second})
	fill, err := sql.Open("sqlite", wdsn)
	if err != nil {
		t.Fatal(err)
	}
	err = aged.SQLite(ctx, fill, hotpath.Shape(finished, s.clock()))
	fill.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := hotpath.Setup(ctx, s); err != nil {
		t.Fatal(err)
	}
	tr, db := traceStore(t, s, path)
	partial := partialIndexes(t, db)
	for _, op := range hotpath.Ops(finished) {
		if err := op.Run(ctx, s); err != nil {
			t.Fatalf("%s: %v", op.Name, err)
		}
		stmts := tr.take()
		if len(stmts) == 0 {
			t.Fatalf("%s ran no statement: the trace no longer sees the store's statements", op.Name)
		}
		checkPlans(t, db, op.Name, stmts, partial)
	}
}

// triggerBody splits a trigger's statements out of its CREATE TRIGGER,
// each with NEW.x and OLD.x as parameters (the row's values are bound
// when the trigger runs, as parameters are).
var (
	triggerBody = regexp.MustCompile(`(?is)\bBEGIN\b(.*)\bEND\s*$`)
	rowRef      = regexp.MustCompile(`(?i)\b(NEW|OLD)\.\w+`)
)

// TestTriggersReachRowsThroughIndexes asks SQLite for the plan of every
// statement of every trigger (the writes a change makes besides its own:
// state counts, running counts, status events), with the row's values as
// parameters, and fails on any that reads a table that grows with the
// queue whole: a trigger runs on every write of its table, so such a
// plan would make every drain, enqueue and webhook cost in proportion to
// the queue kept.
func TestTriggersReachRowsThroughIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rs, err := s.r.Query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	type trigger struct{ name, sql string }
	var triggers []trigger
	for rs.Next() {
		var tr trigger
		if err := rs.Scan(&tr.name, &tr.sql); err != nil {
			t.Fatal(err)
		}
		triggers = append(triggers, tr)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	if len(triggers) < 10 {
		t.Fatalf("%d triggers found: the query no longer sees them", len(triggers))
	}
	partial := partialIndexes(t, s.r)
	for _, tr := range triggers {
		m := triggerBody.FindStringSubmatch(tr.sql)
		if m == nil {
			t.Fatalf("trigger %s: no body in %s", tr.name, tr.sql)
		}
		var stmts []traced
		for _, q := range strings.Split(m[1], ";") {
			if strings.TrimSpace(q) == "" {
				continue
			}
			q = rowRef.ReplaceAllString(q, "?")
			stmts = append(stmts, traced{query: q, args: make([]any, strings.Count(q, "?"))})
		}
		if len(stmts) == 0 {
			t.Fatalf("trigger %s: no statement in %s", tr.name, tr.sql)
		}
		checkPlans(t, s.r, "trigger "+tr.name, stmts, partial)
	}
}
