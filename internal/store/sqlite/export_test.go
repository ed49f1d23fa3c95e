package sqlite

import (
	"context"
	"database/sql"
)

// ExecForTest runs a statement on the writer, for tests that must put a
// database into a state no msgq would (a schema from the future).
func (s *Store) ExecForTest(ctx context.Context, q string) (sql.Result, error) {
	return s.w.ExecContext(ctx, q)
}
