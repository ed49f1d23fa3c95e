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
	c.t.record(q, nil)
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *traceConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// traceReads replaces s's reader pool by one that records what it runs
// (the reads of Stats and MessageStuck), and returns the original pool,
// on which the test may run EXPLAIN.
func traceReads(tb testing.TB, s *Store, path string) (*tracer, *sql.DB) {
	tb.Helper()
	t := &tracer{}
	db := sql.OpenDB(&traceConnector{dsn: path + "?_pragma=query_only(1)", d: s.r.Driver(), t: t})
	orig := s.r
	s.r = db
	tb.Cleanup(func() { db.Close() })
	return t, orig
}

// bigTables are the tables that grow with the queue: a plan that reads one
// of them whole (or one of their full indexes whole) costs time in
// proportion to every row ever sent. The others (state_counts, identities,
// counters) hold a row per identity, state or counter.
var bigTables = map[string]bool{"messages": true, "history": true, "attempts": true}

var scanLine = regexp.MustCompile(`^SCAN (\w+)(?: AS (\w+))?(?: USING (?:COVERING )?INDEX (\w+))?`)

// fullScans returns the lines of plan that read a big table, or a full
// index of one, from end to end. A scan of a partial index is bounded by
// the rows its predicate admits (queued, in flight), and so allowed.
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
		if idx := m[3]; idx != "" && partial[idx] {
			continue
		}
		bad = append(bad, line)
	}
	return bad
}

// aliasOf maps the aliases a statement gives its tables ("history h") to
// the tables.
var aliasOf = regexp.MustCompile(`(?i)\b(messages|history|attempts)\s+(?:AS\s+)?([a-z]\w*)`)

func aliases(q string) map[string]string {
	out := map[string]string{}
	for _, m := range aliasOf.FindAllStringSubmatch(q, -1) {
		switch strings.ToUpper(m[2]) {
		case "WHERE", "INDEXED", "SET", "ORDER", "GROUP", "LIMIT", "ON", "JOIN", "USING", "NOT", "AND", "OR":
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

	tr, db := traceReads(t, s, path)
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
			t.Fatalf("%s ran no statement on the reader: the trace no longer sees the store's reads", c.name)
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
