package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgq/msgq/internal/state"
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

// releasedSQL is the text of migrations 0017-0020 as msgq released them
// (enqueue() in PL/pgSQL, superseded by 0026) and of the phone metadata
// they loaded: testdata/released, fixtures, never run by Migrate.
func releasedSQL(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "released", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// releasedSchema is a fresh schema as a released msgq left it at version
// v: the migrations up to v, with 0017-0020 as they were released (their
// functions, the phone metadata and sql_identities with every column), and
// for v >= 17 a message enqueued by the released enqueue().
func releasedSchema(t *testing.T, url string, v int) (h *handle, oldID string) {
	t.Helper()
	ctx := context.Background()
	h = open(t, url, freshSchema(t, url), Options{NoMigrate: true})
	if _, err := h.migrate(ctx, min(v, 16)); err != nil {
		t.Fatal(err)
	}
	if v < 17 {
		return h, ""
	}
	released := []string{"0017_sql_enqueue.sql", "0018_sql_enqueue_parity.sql", "0019_sql_enqueue_unicode.sql", "0020_sql_enqueue_quiet.sql"}
	for i, name := range released[:min(v, 20)-16] {
		if _, err := h.pool.Exec(ctx, releasedSQL(t, name)); err != nil {
			t.Fatalf("released %s: %v", name, err)
		}
		if i == 0 {
			if _, err := h.pool.Exec(ctx, releasedSQL(t, "phone_metadata.sql")); err != nil {
				t.Fatalf("released phone metadata: %v", err)
			}
			if _, err := h.pool.Exec(ctx, "INSERT INTO phone_metadata_version (library, hash) VALUES ('v1.8.1', 'released')"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.pool.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())", 17+i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.migrate(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, "INSERT INTO sql_identities (name, channels, is_default, updated_at) VALUES ('sim', '{whatsapp,sms}', true, now())"); err != nil {
		t.Fatal(err)
	}
	if err := h.pool.QueryRow(ctx, "SELECT enqueue(key => 'released', to_addr => '+1 555 123 4567', text => 'hi')").Scan(&oldID); err != nil {
		t.Fatalf("the released enqueue() at %d: %v", v, err)
	}
	return h, oldID
}

// catalog is what a schema holds, its name written S: tables and their
// columns, indexes, constraints, triggers and functions (with their
// bodies and settings).
func catalog(t *testing.T, h *handle) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, q := range []string{
		`SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
		        coalesce(column_default, '') || ' ' || coalesce(collation_name, '')
		 FROM information_schema.columns WHERE table_schema = $1`,
		`SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1`,
		`SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		 FROM pg_constraint WHERE connamespace = $1::regnamespace`,
		`SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger
		 WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = $1::regnamespace)`,
		`SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || md5(p.prosrc) || ' ' ||
		        coalesce(array_to_string(p.proconfig, ','), '')
		 FROM pg_proc p WHERE p.pronamespace = $1::regnamespace`,
	} {
		rs, err := h.pool.Query(ctx, q, h.schema)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			out = append(out, strings.ReplaceAll(l, h.schema, "S"))
		}
	}
	slices.Sort(out)
	return out
}

// TestEveryReleasedSchemaUpgradesToTheSQLIntake: a schema at each
// released version (1 to the one before 0026; from 17 to 25 with the
// released PL/pgSQL enqueue() and its phone metadata) migrates to the same
// schema as a new one, object for object: the released functions and
// tables gone, sql_identities down to names. The message the released
// enqueue() wrote is queued as it was, and the new enqueue() takes a send
// in by the identity the released one had recorded; the released call,
// repeated with the number as stored, is a replay of its message.
func TestEveryReleasedSchemaUpgradesToTheSQLIntake(t *testing.T) {
	url := testURL(t)
	t.Parallel()
	ctx := context.Background()
	fresh := open(t, url, freshSchema(t, url), Options{})
	want := catalog(t, fresh)
	if !slices.ContainsFunc(want, func(l string) bool { return strings.HasPrefix(l, "function enqueue(") }) ||
		slices.ContainsFunc(want, func(l string) bool { return strings.Contains(l, "phone_") }) {
		t.Fatalf("a new schema's catalog lacks enqueue() or keeps phone metadata:\n%s", strings.Join(want, "\n"))
	}
	for v := 1; v < 26; v++ {
		t.Run(fmt.Sprint("from ", v), func(t *testing.T) {
			t.Parallel()
			h, oldID := releasedSchema(t, url, v)
			if applied, err := h.Migrate(ctx); err != nil || !reflect.DeepEqual(applied, migrationsAfter(t, v)) {
				t.Fatalf("migrating from %d applied %v, %v; want %v", v, applied, err, migrationsAfter(t, v))
			}
			if got := catalog(t, h); !reflect.DeepEqual(got, want) {
				for _, l := range got {
					if !slices.Contains(want, l) {
						t.Errorf("upgraded from %d, not in a new schema: %s", v, l)
					}
				}
				for _, l := range want {
					if !slices.Contains(got, l) {
						t.Errorf("a new schema's, missing once upgraded from %d: %s", v, l)
					}
				}
				return
			}
			if oldID != "" {
				m, err := h.MessageGet(ctx, "", oldID)
				if err != nil || m.State != state.Queued || m.To != "+15551234567" {
					t.Fatalf("the released enqueue()'s message after the upgrade: %+v, %v", m, err)
				}
				// The released call again: a replay when it gives the number
				// as stored, a conflict written another way (the contract
				// of docs/sql-enqueue.md).
				var again string
				if err := h.pool.QueryRow(ctx, "SELECT enqueue(key => 'released', to_addr => '+15551234567', text => 'hi')").Scan(&again); err != nil || again != oldID {
					t.Fatalf("the released call with the number as stored, after the upgrade: %q, %v; want a replay of %s", again, err, oldID)
				}
				if err := h.pool.QueryRow(ctx, "SELECT enqueue(key => 'released', to_addr => '+1 555 123 4567', text => 'hi')").Scan(&again); !isCode(err, "MQ409") {
					t.Fatalf("the released call as it was written, after the upgrade: %q, %v; want MQ409", again, err)
				}
				var id string
				if err := h.pool.QueryRow(ctx, "SELECT enqueue(key => 'intake', to_addr => '+15551234567', text => 'hi')").Scan(&id); err != nil {
					t.Fatalf("enqueue() after the upgrade: %v", err)
				}
				if m, err := h.MessageGet(ctx, "", id); err != nil || m.State != state.Intake || m.Identity != "sim" {
					t.Fatalf("taken in after the upgrade: %+v, %v", m, err)
				}
			}
		})
	}
}
