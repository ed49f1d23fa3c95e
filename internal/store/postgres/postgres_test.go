package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// testURL is the database the tests use, from MSGQ_TEST_POSTGRES_URL:
// they skip without it, except in CI, where a skip would hide the store.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_POSTGRES_URL is not set: PostgreSQL tests must not skip in CI")
		}
		t.Skip("MSGQ_TEST_POSTGRES_URL is not set")
	}
	return u
}

// poolerURL is a transaction-mode pgbouncer in front of testURL's server,
// from MSGQ_TEST_PGBOUNCER_URL (.ci/run starts one): the tests skip
// without it, except in CI.
func poolerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("MSGQ_TEST_PGBOUNCER_URL")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("MSGQ_TEST_PGBOUNCER_URL is not set: the tests through a pooler must not skip in CI")
		}
		t.Skip("MSGQ_TEST_PGBOUNCER_URL is not set")
	}
	return u
}

// freshSchema names a new schema, dropped (with everything in it) when t
// ends, after the stores opened on it are closed.
func freshSchema(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 8)
	rand.Read(b)
	schema := "msgq_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

type handle struct {
	*Store
	url, schema string
}

func open(t *testing.T, url, schema string, opts Options) *handle {
	t.Helper()
	opts.Schema = schema
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &handle{s, url, schema}
}

func TestConformance(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	storetest.Exercise(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) store.Store {
			return open(t, url, freshSchema(t, url), Options{Now: now})
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			h := s.(*handle)
			return open(t, h.url, h.schema, Options{})
		},
		RawTx: rawTx,
	})
}

// TestConformanceThroughAPooler runs the suite through a transaction
// pooler, found by detection (the URL does not say pooler=), with each
// store's schema applied per transaction. Its schemas are made and
// dropped on the server directly.
func TestConformanceThroughAPooler(t *testing.T) {
	direct, pooler := testURL(t), poolerURL(t)
	t.Parallel()
	open := func(t *testing.T, schema string, opts Options) *handle {
		h := open(t, pooler, schema, opts)
		if h.pooled == "" {
			t.Fatalf("no pooler detected at %s", pooler)
		}
		return h
	}
	storetest.Exercise(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) store.Store {
			return open(t, freshSchema(t, direct), Options{Now: now})
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return open(t, s.(*handle).schema, Options{})
		},
		RawTx: rawTx,
	})
}

func TestConcurrentMigrationsApplyEachVersionOnce(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	schema := freshSchema(t, url)
	ms, err := store.ParseMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	stores := make([]*handle, n)
	for i := range stores {
		stores[i] = open(t, url, schema, Options{NoMigrate: true})
	}
	var wg sync.WaitGroup
	applied := make([][]int, n)
	errs := make([]error, n)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = s.Migrate(ctx)
		}()
	}
	wg.Wait()
	var all []int
	for i := range stores {
		if errs[i] != nil {
			t.Errorf("migrate %d: %v", i, errs[i])
		}
		all = append(all, applied[i]...)
	}
	sort.Ints(all)
	if len(all) != len(ms) {
		t.Fatalf("concurrent migrations applied %v in all; want each of %d versions once", all, len(ms))
	}
	for i, v := range all {
		if v != ms[i].Version {
			t.Fatalf("concurrent migrations applied %v in all; want each version once", all)
		}
	}
	var rows int
	if err := stores[0].pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&rows); err != nil || rows != len(ms) {
		t.Errorf("schema_migrations has %d rows (%v), want %d", rows, err, len(ms))
	}
	if again, err := stores[0].Migrate(ctx); err != nil || len(again) != 0 {
		t.Errorf("migrating again applied %v, %v; want nothing", again, err)
	}
}

func TestASchemaFromANewerMsgqIsRefused(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	schema := freshSchema(t, url)
	h := open(t, url, schema, Options{})
	if _, err := h.pool.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (99, now())"); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, url, Options{Schema: schema})
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("open of a version-99 schema: err = %v, want ErrSchemaTooNew", err)
	}
}

// TestStatsReportTheLargestRecentClockOffset: each process keeps one row
// (its latest measurement); stats shows the largest by magnitude, sign
// kept, of those measured within store.ClockOffsetRecent, and a process
// that stopped measuring drops out of it.
func TestStatsReportTheLargestRecentClockOffset(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	clk := storetest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	s := open(t, url, freshSchema(t, url), Options{Now: clk.Now})
	stats := func() (time.Duration, string) {
		t.Helper()
		st, err := s.Stats(ctx, &store.StatsParams{})
		if err != nil {
			t.Fatal(err)
		}
		return st.ClockOffset, st.ClockOffsetProcess
	}
	if off, p := stats(); off != 0 || p != "" {
		t.Fatalf("no measurement yet: %s by %q", off, p)
	}
	record := func(process string, off time.Duration) {
		t.Helper()
		if err := s.ClockOffsetRecord(ctx, &store.ClockOffset{Process: process, Host: "h", Role: "drain", Offset: off, RTT: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	record("ahead", 3*time.Second)
	record("behind", -9*time.Second)
	clk.Advance(store.ClockOffsetRecent - time.Minute)
	record("ahead", 4*time.Second) // its latest measurement replaces the first
	if off, p := stats(); off != -9*time.Second || p != "behind" {
		t.Errorf("stats: %s by %q, want -9s by behind", off, p)
	}
	clk.Advance(2 * time.Minute) // behind has not measured for longer than ClockOffsetRecent
	if off, p := stats(); off != 4*time.Second || p != "ahead" {
		t.Errorf("stats after behind stopped: %s by %q, want 4s by ahead", off, p)
	}
	if err := s.ClockOffsetRecord(ctx, &store.ClockOffset{}); err == nil {
		t.Error("an offset of no process was recorded")
	}
}

// rawTx runs stmts in one transaction on the store's own pool (its schema
// applied) and commits it, or rolls it back when !commit.
func rawTx(t *testing.T, s store.Store, commit bool, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.(*handle).pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if commit {
		err = tx.Commit(ctx)
	} else {
		err = tx.Rollback(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}
