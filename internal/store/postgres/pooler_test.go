package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [][2]string
		bad  string
	}{
		{in: "", want: nil},
		{in: "-c search_path=a", want: [][2]string{{"search_path", "a"}}},
		{in: "  -csearch_path=a\t--statement-timeout=5s ", want: [][2]string{{"search_path", "a"}, {"statement_timeout", "5s"}}},
		{in: `-c search_path=a,\ b -c application_name=x\\y`, want: [][2]string{{"search_path", "a, b"}, {"application_name", `x\y`}}},
		{in: "-c work_mem=", want: [][2]string{{"work_mem", ""}}},
		{in: "-B 100", bad: `"-B" is not a setting`},
		{in: "-c", bad: "-c without a setting"},
		{in: "-c search_path", bad: `"search_path" is not name=value`},
		{in: "--=x", bad: `"=x" is not name=value`},
	} {
		got, err := parseOptions(c.in)
		var ie *store.InvalidError
		switch {
		case c.bad != "":
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("parseOptions(%q) = %v, %v; want an InvalidError saying %q", c.in, got, err, c.bad)
			}
		case err != nil || !reflect.DeepEqual(got, c.want):
			t.Errorf("parseOptions(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestQuoteLiteral runs each quoted string through the server: it comes
// back as it went in, standard_conforming_strings on or off.
func TestQuoteLiteral(t *testing.T) {
	base := testURL(t)
	t.Parallel()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, scs := range []string{"on", "off"} {
		if _, err := c.Exec(ctx, "SET standard_conforming_strings = "+scs); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"", "plain", "it's", `back\slash`, `\'; SELECT 1; --`, "\"$user\", public", "ünï"} {
			// The simple protocol, as a BEGIN with the settings goes.
			res, err := c.PgConn().Exec(ctx, "SELECT "+quoteLiteral(s)).ReadAll()
			if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != s {
				t.Errorf("standard_conforming_strings=%s: %s read back as %v, %v; want %q", scs, quoteLiteral(s), res, err, s)
			}
		}
	}
}

// TestPoolerDetection: a store reached directly keeps its sessions (and
// so LISTENs); through pgbouncer it finds out by itself that it must not;
// pooler=transaction and pooler=none say so instead of the probe.
func TestPoolerDetection(t *testing.T) {
	direct, pooler := testURL(t), poolerURL(t)
	t.Parallel()
	ctx := context.Background()
	schema := freshSchema(t, direct)
	for i, c := range []struct {
		name, url string
		pooled    string // what Store.pooled says, in part; "" for none
	}{
		{"directly", direct, ""},
		{"through pgbouncer", pooler, "a pooler was detected"},
		{"pooler=transaction", withQuery(t, direct, "pooler", "transaction"), "pooler=transaction in the URL"},
		{"pooler=none", withQuery(t, direct, "pooler", "none"), ""},
		{"pooler=auto", withQuery(t, pooler, "pooler", "auto"), "a pooler was detected"},
	} {

		t.Run(c.name, func(t *testing.T) {
			h := open(t, c.url, schema, Options{})
			if (c.pooled == "") != (h.pooled == "") || !strings.Contains(h.pooled, c.pooled) {
				t.Fatalf("pooled = %q, want %q", h.pooled, c.pooled)
			}
			wake, err := h.Enqueued(ctx)
			if c.pooled == "" {
				if err != nil || wake == nil {
					t.Errorf("Enqueued directly: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNoWakeups) || !strings.Contains(err.Error(), c.pooled) {
				t.Errorf("Enqueued behind a pooler: %v, want ErrNoWakeups saying %q", err, c.pooled)
			}
			// And the store works: an enqueue and a read in the schema.
			if _, err := h.MessageEnqueue(ctx, ptr(storetest.Params(fmt.Sprintf("det-%d", i)))); err != nil {
				t.Fatal(err)
			}
		})
	}
	// On a server, the pool's first connection is made as for a pooler,
	// and then makes the URL's settings itself; one that only a startup
	// can make (log_connections) has it made again with them. Either way
	// every connection has them.
	t.Run("the URL's settings on a server", func(t *testing.T) {
		h := open(t, withQuery(t, withQuery(t, direct, "options", "-c log_connections=on"), "work_mem", "5MB"), schema, Options{})
		if h.pooled != "" {
			t.Fatalf("pooled = %q", h.pooled)
		}
		conns := make([]*pgxpool.Conn, 3)
		for i := range conns {
			c, err := h.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = c
			var lc, wm, sp string
			if err := c.QueryRow(ctx, "SELECT current_setting('log_connections'), current_setting('work_mem'), current_setting('search_path')").Scan(&lc, &wm, &sp); err != nil {
				t.Fatal(err)
			}
			if lc != "on" || wm != "5MB" || !strings.Contains(sp, schema) {
				t.Errorf("connection %d: log_connections %s, work_mem %s, search_path %s", i, lc, wm, sp)
			}
		}
		for _, c := range conns {
			c.Release()
		}
	})
	if _, err := Open(ctx, withQuery(t, direct, "pooler", "always"), Options{Schema: schema}); !isInvalid(err) {
		t.Errorf("pooler=always: %v, want an InvalidError", err)
	}
}

// TestFirstConnectionRetiredOnAServer: on a server, the pool's first
// connection (made as for a pooler, without a statement cache) is
// retired after probeUses loans, and the connections after it cache
// statements; through a pooler every connection stays without one.
func TestFirstConnectionRetiredOnAServer(t *testing.T) {
	direct, pooler := testURL(t), poolerURL(t)
	t.Parallel()
	ctx := context.Background()
	schema := freshSchema(t, direct)
	for _, c := range []struct {
		name, url string
		mode      pgx.QueryExecMode // of every connection after the first's retirement
	}{
		{"directly", direct, pgx.QueryExecModeCacheStatement},
		{"through pgbouncer", pooler, pgx.QueryExecModeExec},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := open(t, c.url, schema, Options{})
			// One statement at a time: the pool lends its one connection.
			for i := range probeUses + 1 {
				if _, err := h.MessageGet(ctx, "", fmt.Sprintf("nosuch-%d", i)); !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
			}
			conns := h.pool.AcquireAllIdle(ctx)
			if len(conns) == 0 {
				t.Fatal("no idle connection")
			}
			for i, pc := range conns {
				cc := pc.Conn().Config()
				if cc.DefaultQueryExecMode != c.mode {
					t.Errorf("connection %d: exec mode %v, want %v", i, cc.DefaultQueryExecMode, c.mode)
				}
				// Made with the URL's settings at startup (behind a
				// pooler they are applied per transaction instead).
				var sp string
				if err := pc.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&sp); c.mode == pgx.QueryExecModeCacheStatement && (err != nil || !strings.Contains(sp, schema)) {
					t.Errorf("connection %d: search_path %q (%v), want the schema %s", i, sp, err, schema)
				}
				pc.Release()
			}
		})
	}
}

// TestPoolerSettingsApplyToEachTransaction: behind a pooler the URL's
// settings hold in every statement, in or out of a transaction, in a
// batch, and in a read-only repeatable-read transaction, and leave
// nothing on the server connections the pooler lends to others.
func TestPoolerSettingsApplyToEachTransaction(t *testing.T) {
	direct, pooler := testURL(t), poolerURL(t)
	t.Parallel()
	ctx := context.Background()
	schema := freshSchema(t, direct)
	u := withQuery(t, withQuery(t, pooler, "options", "-c statement_timeout=42s --lock-timeout=7s"), "work_mem", "3MB")
	h := open(t, u, schema, Options{})
	if h.pooled == "" || h.pool.local == "" {
		t.Fatalf("pooled %q, local %q: want a pooler and settings", h.pooled, h.pool.local)
	}
	const show = "SELECT current_setting('search_path'), current_setting('statement_timeout'), current_setting('lock_timeout'), current_setting('work_mem')"
	want := []string{pgx.Identifier{schema}.Sanitize(), "42s", "7s", "3MB"}
	check := func(how string, scan func(dest ...any) error) {
		t.Helper()
		got := make([]string, 4)
		if err := scan(&got[0], &got[1], &got[2], &got[3]); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: settings %q, want %q", how, got, want)
		}
	}
	for range 3 {
		check("QueryRow", h.pool.QueryRow(ctx, show).Scan)
		check("Query", func(dest ...any) error {
			rs, err := h.pool.Query(ctx, show)
			if err != nil {
				return err
			}
			return scanOne(rs, dest...)
		})
		check("in a batch", func(dest ...any) error {
			b := &pgx.Batch{}
			b.Queue("SELECT 1")
			b.Queue(show)
			br := h.pool.SendBatch(ctx, b)
			defer br.Close()
			if _, err := br.Exec(); err != nil {
				return err
			}
			if err := br.QueryRow().Scan(dest...); err != nil {
				return err
			}
			return br.Close()
		})
		check("in a transaction", func(dest ...any) error {
			return pgx.BeginTxFunc(ctx, h.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
				var iso string
				if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&iso); err != nil || iso != "repeatable read" {
					t.Errorf("isolation %q, %v", iso, err)
				}
				return tx.QueryRow(ctx, show).Scan(dest...)
			})
		})
		if tag, err := h.pool.Exec(ctx, "SELECT 1"); err != nil || tag.String() != "SELECT 1" {
			t.Errorf("Exec: %v, %v", tag, err)
		}
	}
	// Another client of the pooler, setting nothing, is lent the same
	// server connections and finds the defaults there.
	cc, err := pgx.ParseConfig(pooler)
	if err != nil {
		t.Fatal(err)
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	other, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	for range 10 {
		var sp, st string
		if err := other.QueryRow(ctx, "SELECT current_setting('search_path'), current_setting('statement_timeout')").Scan(&sp, &st); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sp, schema) || st == "42s" {
			t.Fatalf("a client that set nothing found search_path %q, statement_timeout %q", sp, st)
		}
	}
	// An error in the statement after the settings is that statement's.
	if _, err := h.pool.Exec(ctx, "SELECT * FROM no_such_table"); err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Errorf("Exec of a bad statement: %v", err)
	}
	if err := h.pool.QueryRow(ctx, "SELECT 1 WHERE false").Scan(new(int)); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("QueryRow with no row: %v, want ErrNoRows", err)
	}
}

func scanOne(rs pgx.Rows, dest ...any) error {
	defer rs.Close()
	if !rs.Next() {
		return errors.Join(rs.Err(), pgx.ErrNoRows)
	}
	if err := rs.Scan(dest...); err != nil {
		return err
	}
	if rs.Next() {
		return errors.New("more than one row")
	}
	return rs.Err()
}

// TestNoSessionStateInTheStore reads the store's own source: nothing in
// it may count on a session lasting from one transaction to the next, as
// it does not behind a transaction pooler. Advisory locks are taken with
// pg_advisory_xact_lock (released at commit), settings with
// set_config(..., true) or SET LOCAL (pooler.go makes the URL's
// settings for a session only once it knows a server holds it), and
// LISTEN only in notify.go, which Enqueued does not reach behind a
// pooler.
func TestNoSessionStateInTheStore(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	migrations, err := filepath.Glob("migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []struct {
		re   *regexp.Regexp
		why  string
		only string // the file where it is allowed
	}{
		{regexp.MustCompile(`(?i)pg_(try_)?advisory_lock(_shared)?\s*\(`), "a session-level advisory lock outlives the transaction", ""},
		{regexp.MustCompile(`(?i)pg_advisory_unlock`), "a session-level advisory lock outlives the transaction", ""},
		{regexp.MustCompile(`(?i)["\x60]\s*SET\s+(SESSION\s+)?[a-z_]+\s*(=|TO\b)`), "a SET lasts for the session: use SET LOCAL or set_config(..., true)", ""},
		{regexp.MustCompile(`(?i)set_config\([^)]*,\s*false\s*\)`), "set_config(..., false) lasts for the session", ""},
		{regexp.MustCompile(`(?i)["\x60]\s*PREPARE\s`), "a prepared statement lives on one server connection", ""},
		{regexp.MustCompile(`(?i)CREATE\s+(TEMP|TEMPORARY)\s`), "a temporary table lives on one server connection", ""},
		{regexp.MustCompile(`"LISTEN `), "a LISTEN lasts for the session", "notify.go"},
	}
	for _, f := range append(files, migrations...) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, fb := range forbidden {
			if fb.only == f {
				continue
			}
			if loc := fb.re.FindIndex(src); loc != nil {
				line := 1 + strings.Count(string(src[:loc[0]]), "\n")
				t.Errorf("%s:%d: %q: %s, and behind a transaction pooler the next transaction may run on another", f, line, src[loc[0]:loc[1]], fb.why)
			}
		}
	}
}

func withQuery(t testing.TB, raw, key, val string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, val)
	// Spaces as %20: libpq and pgx read a + in a URL as a +.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

func isInvalid(err error) bool {
	var ie *store.InvalidError
	return errors.As(err, &ie)
}

// BenchmarkOpen is what a command pays to open the store (migrated
// already): with pooler=auto the probe's connection comes first, which
// pooler=none and pooler=transaction skip.
func BenchmarkOpen(b *testing.B) {
	direct := testURL(b)
	schema := freshSchema(b, direct)
	s, err := Open(context.Background(), direct, Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	urls := map[string]string{"direct/auto": direct, "direct/none": withQuery(b, direct, "pooler", "none")}
	if p := os.Getenv("MSGQ_TEST_PGBOUNCER_URL"); p != "" {
		urls["pgbouncer/auto"], urls["pgbouncer/transaction"] = p, withQuery(b, p, "pooler", "transaction")
	}
	for _, name := range []string{"direct/auto", "direct/none", "pgbouncer/auto", "pgbouncer/transaction"} {
		u, ok := urls[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				s, err := Open(context.Background(), withQuery(b, u, "search_path", schema), Options{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.MessageGet(context.Background(), "", "nosuch"); !errors.Is(err, store.ErrNotFound) {
					b.Fatal(err)
				}
				s.Close()
			}
		})
	}
}
