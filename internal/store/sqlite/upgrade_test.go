package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

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
	// Only what came after c946b42 (0012 opt-outs, 0013 daily recipients, 0014 challenges, 0015 API keys, 0016 events, 0017 SQL enqueue, 0018 its CLI parity, 0019 its Unicode phone numbers, 0020 its quiet hours, 0021 reconcile notes); nothing runs again.
	if err != nil || !reflect.DeepEqual(applied, []int{12, 13, 14, 15, 16, 17, 18, 19, 20, 21}) {
		t.Fatalf("migrating a c946b42 store applied %v, %v; want [12 13 14 15 16 17 18 19 20 21] (what came after it)", applied, err)
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
	if err != nil || !reflect.DeepEqual(applied, []int{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}) {
		t.Fatalf("migrating a version-9 store applied %v, %v; want [10 11 12 13 14 15 16 17 18 19 20 21]", applied, err)
	}
	storetest.FixtureC946b42(t, s, time.Now())
}
