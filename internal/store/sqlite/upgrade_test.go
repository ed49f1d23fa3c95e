package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

// migrationsAfter is the versions of the embedded migrations after v.
func migrationsAfter(t *testing.T, v int) []int {
	t.Helper()
	vs, err := sqlite.MigrationsAfterForTest(v)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// fixtureCopy copies testdata/c946b42.db (a store made by msgq at commit
// c946b42, see storetest.FixtureC946b42) to a fresh directory.
func fixtureCopy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "c946b42.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "msgq.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// SQLite's numbers were already the shared ones (1-9 and 11; 10 is
// PostgreSQL's clock offsets, a no-op here): a store from c946b42 is
// current, and one from before 0011 gets 10 and 11.
func TestAStoreFromC946b42OpensAndMigratesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := fixtureCopy(t)
	s, err := sqlite.Open(ctx, path, sqlite.Options{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	applied, err := s.Migrate(ctx)
	// Only what came after c946b42 (0012 opt-outs and every later one); nothing runs again.
	if later := migrationsAfter(t, 11); err != nil || !reflect.DeepEqual(applied, later) {
		t.Fatalf("migrating a c946b42 store applied %v, %v; want %v (what came after it)", applied, err, later)
	}
	storetest.FixtureC946b42(t, s, time.Now())
}

func TestAStoreFromBeforeVitalsGetsTheRestOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := fixtureCopy(t)
	s, err := sqlite.Open(ctx, path, sqlite.Options{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Undo 0011 (the fixture's last migration), as a store made before
	// it was written would be.
	for _, q := range []string{"DROP TABLE counts_by_minute", "DROP INDEX history_failed", "DROP INDEX history_sent",
		"DROP INDEX messages_maybe_sent", "PRAGMA user_version = 9"} {
		if _, err := s.ExecForTest(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := s.Migrate(ctx)
	if later := migrationsAfter(t, 9); err != nil || !reflect.DeepEqual(applied, later) {
		t.Fatalf("migrating a version-9 store applied %v, %v; want %v", applied, err, later)
	}
	storetest.FixtureC946b42(t, s, time.Now())
}

// A store may hold one delivery several times (nothing refused a copy
// before 0021): migrating it keeps them all and does not fail.
func TestAStoreHoldingOneDeliveryTwiceMigrates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, fixtureCopy(t), sqlite.Options{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := []string{"01KB0000000000000000000001", "01KB0000000000000000000002"}
	for _, id := range ids {
		if _, err := s.ExecForTest(ctx, "INSERT INTO webhook_events (id, provider, identity, headers, body, received_at) "+
			"VALUES ('"+id+"', 'whatsapp', 'shop', '{}', CAST('{\"entry\":[]}' AS BLOB), 1764410400000000)"); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := s.Migrate(ctx); err != nil || !slices.Contains(applied, 21) {
		t.Fatalf("migrating applied %v, %v; want 21 among them", applied, err)
	}
	storetest.DuplicateDeliveriesMigrated(t, s, ids, []byte(`{"entry":[]}`))
}
