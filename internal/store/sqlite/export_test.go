package sqlite

import (
	"context"
	"database/sql"

	"github.com/msgq/msgq/internal/store"
)

// ExecForTest runs a statement on the writer, for tests that must put a
// database into a state no msgq would (a schema from the future).
func (s *Store) ExecForTest(ctx context.Context, q string) (sql.Result, error) {
	return s.w.ExecContext(ctx, q)
}

// MigrateToForTest applies the migrations up to version v only, for tests
// of what a later migration does to data written before it.
func (s *Store) MigrateToForTest(ctx context.Context, v int) error {
	ms, err := store.ParseMigrations(migrationFS, "migrations")
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.Version > v {
			break
		}
		if _, err := s.applyMigration(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// RawTxForTest runs stmts in one write transaction and commits it, or
// rolls it back when !commit.
func (s *Store) RawTxForTest(ctx context.Context, commit bool, stmts ...string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	if !commit {
		return tx.Rollback()
	}
	return tx.Commit()
}

// MigrationsAfterForTest is the versions of the embedded migrations after
// v, in order: what a store at v gets, whatever has been added since.
func MigrationsAfterForTest(v int) ([]int, error) {
	ms, err := store.ParseMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, m := range ms {
		if m.Version > v {
			out = append(out, m.Version)
		}
	}
	return out, nil
}
