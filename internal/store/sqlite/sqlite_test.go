package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

type handle struct {
	*sqlite.Store
	path string
}

func open(t *testing.T, path string, now func() time.Time) *handle {
	t.Helper()
	// A minute to wait for the write lock, not the default ten seconds:
	// the suite's concurrent-claims test has four handles of one file take
	// turns, and on a CI host at a load average of 12 (the cli tests beside
	// it) one of them waited past ten seconds and failed with SQLITE_BUSY.
	// What the tests check is who gets which row, not how long a turn takes.
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Now: now, BusyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &handle{s, path}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storetest.Harness{
		New: func(t *testing.T, now func() time.Time) store.Store {
			return open(t, filepath.Join(t.TempDir(), "msgq.db"), now)
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return open(t, s.(*handle).path, nil)
		},
		RawTx: func(t *testing.T, s store.Store, commit bool, stmts ...string) {
			if err := s.(*handle).RawTxForTest(context.Background(), commit, stmts...); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestNewFileIsPrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nested", "dir", "msgq.db")
	open(t, path, nil)
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %o, want %o", p, got, want)
		}
	}
}

func TestMigrateFromScratchAppliesEachVersionOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "msgq.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	applied, err := s.Migrate(ctx)
	if err != nil || len(applied) < 2 {
		t.Fatalf("first migrate applied %v, %v; want every version", applied, err)
	}
	// In ascending order, each once. Versions need not be contiguous:
	// numbers are reserved ahead for changes made in parallel.
	for i, v := range applied {
		if v < 1 || (i > 0 && v <= applied[i-1]) {
			t.Fatalf("first migrate applied %v; want ascending versions from 1, each once", applied)
		}
	}
	if applied, err = s.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Errorf("second migrate applied %v, %v; want nothing", applied, err)
	}
}

func TestASchemaFromANewerMsgqIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "msgq.db")
	h := open(t, path, nil)
	if _, err := h.ExecForTest(ctx, "PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(ctx, path, sqlite.Options{})
	if !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("open of a version-99 database: err = %v, want ErrSchemaTooNew", err)
	}
}
