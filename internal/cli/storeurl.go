package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/sqlite"
)

// openStore opens the store a --store value names. noMigrate leaves the
// schema alone (msgq migrate applies it itself and reports what it did);
// log receives what the store does on its own (nil: nothing). now is the
// host's clock: SQLite's clock (every process of a SQLite store shares its
// host), never PostgreSQL's, which is the database server's.
func openStore(ctx context.Context, raw string, noMigrate bool, log *slog.Logger, now func() time.Time) (store.Store, error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if path == "" {
			return nil, usagef("store %q names no file (want sqlite:PATH)", raw)
		}
		if rest, ok := strings.CutPrefix(path, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, err
			}
			path = filepath.Join(home, rest)
		}
		warnReadableStore(path, log)
		return sqlite.Open(ctx, path, sqlite.Options{NoMigrate: noMigrate, Now: now})
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		st, err := postgres.Open(ctx, raw, postgres.Options{NoMigrate: noMigrate, Log: log})
		if err != nil {
			return nil, redactErr(raw, fmt.Errorf("store %s: %w", redactURL(raw), err))
		}
		return st, nil
	}
	return nil, usagef("unknown store %q (want sqlite:PATH or postgres://...)", redactURL(raw))
}
