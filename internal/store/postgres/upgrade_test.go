package postgres

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// fixtureSchema loads testdata/c946b42.sql (a pg_dump of a store made by
// msgq at commit c946b42, numbered 1-10 the old way; see
// storetest.FixtureC946b42) into a fresh schema, with nothing migrated
// by the current code, and returns a handle on it that has not migrated.
func fixtureSchema(t *testing.T, url string) *handle {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join("testdata", "c946b42.sql"))
	if err != nil {
		t.Fatal(err)
	}
	schema := freshSchema(t, url)
	h := open(t, url, schema, Options{NoMigrate: true})
	dump := strings.ReplaceAll(string(b), "msgq_old.", pgx.Identifier{schema}.Sanitize()+".")
	if _, err := h.pool.Exec(ctx, dump); err != nil {
		t.Fatalf("load the c946b42 fixture: %v", err)
	}
	return h
}

// migrationsAfter is the versions of the embedded migrations after v, in
// order: what a store at v gets, whatever has been added since.
func migrationsAfter(t *testing.T, v int) []int {
	t.Helper()
	ms, err := store.ParseMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, m := range ms {
		if m.Version > v {
			out = append(out, m.Version)
		}
	}
	return out
}

func versions(t *testing.T, h *handle) []int {
	t.Helper()
	rs, err := h.pool.Query(context.Background(), "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rs, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// A store from c946b42 recorded 1-10 in the old numbering: the runner
// renumbers them once (2-10 become 3-11, and 2, whose tables are in this
// store's 0001, counts as applied), runs nothing again and skips nothing.
func TestAStoreFromC946b42IsRenumberedOnceAndMigratesNothing(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := fixtureSchema(t, url)
	if got := versions(t, h); !reflect.DeepEqual(got, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("the fixture records %v, want the old 1-10", got)
	}
	applied, err := h.Migrate(ctx)
	// Only what came after c946b42 (0012 opt-outs and every later one); nothing runs again.
	if later := migrationsAfter(t, 11); err != nil || !reflect.DeepEqual(applied, later) {
		t.Fatalf("migrating a c946b42 store applied %v, %v; want %v (what came after it)", applied, err, later)
	}
	want := migrationsAfter(t, 0)
	if got := versions(t, h); !reflect.DeepEqual(got, want) {
		t.Fatalf("after migrating, versions %v, want %v", got, want)
	}
	if again, err := h.Migrate(ctx); err != nil || len(again) != 0 || !reflect.DeepEqual(versions(t, h), want) {
		t.Fatalf("migrating again applied %v, %v, versions %v; want nothing changed", again, err, versions(t, h))
	}
	// A second process opening it (migrating on open) finds it current.
	other := open(t, url, h.schema, Options{})
	if got := versions(t, other); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a second open, versions %v, want %v", got, want)
	}
	now, err := h.ClockNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	storetest.FixtureC946b42(t, other, now)
}

// A store at the old 9 (made before vitals) is renumbered to 10 and then
// gets 11, the old 10's change, once.
func TestAStoreFromBeforeVitalsIsRenumberedAndGetsTheRest(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := fixtureSchema(t, url)
	// Undo the old 0010 (vitals), as a store made before it would be.
	for _, q := range []string{"DROP TABLE counts_by_minute", "DROP INDEX history_failed", "DROP INDEX history_sent",
		"DROP INDEX messages_maybe_sent", "DELETE FROM schema_migrations WHERE version = 10"} {
		if _, err := h.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := h.Migrate(ctx)
	if later := migrationsAfter(t, 10); err != nil || !reflect.DeepEqual(applied, later) {
		t.Fatalf("migrating an old version-9 store applied %v, %v; want %v", applied, err, later)
	}
	if got := versions(t, h); !reflect.DeepEqual(got, migrationsAfter(t, 0)) {
		t.Fatalf("after migrating, versions %v", got)
	}
	now, err := h.ClockNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	storetest.FixtureC946b42(t, h, now)
}

// A new schema is numbered the shared way from the start: nothing of it
// is ever renumbered. A schema made when 0010 was the last migration gets
// 0011 and every later one, under their own numbers.
func TestANewSchemaIsNeverRenumbered(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := open(t, url, freshSchema(t, url), Options{NoMigrate: true})
	if _, err := h.migrate(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, h); !reflect.DeepEqual(got, migrationsAfter(t, 0)[:10]) {
		t.Fatalf("a schema migrated to 10 records %v", got)
	}
	applied, err := h.Migrate(ctx)
	if later := migrationsAfter(t, 10); err != nil || !reflect.DeepEqual(applied, later) {
		t.Fatalf("migrating a schema at 10 applied %v, %v; want %v (no renumbering)", applied, err, later)
	}
	if got := versions(t, h); !reflect.DeepEqual(got, migrationsAfter(t, 0)) {
		t.Fatalf("versions %v, want %v", got, migrationsAfter(t, 0))
	}
}

// A store may hold one delivery several times (nothing refused a copy
// before 0021): migrating it keeps them all and does not fail.
func TestAStoreHoldingOneDeliveryTwiceMigrates(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	h := fixtureSchema(t, url)
	ids := []string{"01KB0000000000000000000001", "01KB0000000000000000000002"}
	for _, id := range ids {
		if _, err := h.pool.Exec(ctx, "INSERT INTO webhook_events (id, provider, identity, headers, body, received_at) "+
			"VALUES ($1, 'whatsapp', 'shop', '{}', convert_to('{\"entry\":[]}', 'UTF8'), '2025-11-29T10:00:00Z')", id); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := h.Migrate(ctx); err != nil || !slices.Contains(applied, 21) {
		t.Fatalf("migrating applied %v, %v; want 21 among them", applied, err)
	}
	storetest.DuplicateDeliveriesMigrated(t, h, ids, []byte(`{"entry":[]}`))
}
