// Package storeopen opens the store a URL names (sqlite:PATH,
// postgres://...), and makes store URLs and the errors that quote them
// printable without their passwords. It is the one package above the
// stores that knows both implementations; the CLI opens stores through it.
package storeopen

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

// Options tune Open.
type Options struct {
	// NoMigrate leaves the schema alone (msgq migrate applies it itself
	// and reports what it did).
	NoMigrate bool
	// Log receives what the store does on its own (nil: nothing).
	Log *slog.Logger
	// Now is the host's clock: SQLite's clock (every process of a SQLite
	// store shares its host), never PostgreSQL's, which is the database
	// server's. Nil: time.Now.
	Now func() time.Time
}

// URLError is a store URL refused before anything is opened: no scheme
// msgq knows, or a sqlite: URL that names no file. Its message never
// shows a password.
type URLError struct{ msg string }

func (e *URLError) Error() string { return e.msg }

func urlErrorf(format string, a ...any) error { return &URLError{fmt.Sprintf(format, a...)} }

// Open opens the store raw names. Errors from PostgreSQL are cleaned of
// the URL's password (the driver's message may quote it) and keep the
// driver's error underneath, so ConnectionLost still sees through them.
func Open(ctx context.Context, raw string, o Options) (store.Store, error) {
	switch {
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if path == "" {
			return nil, urlErrorf("store %q names no file (want sqlite:PATH)", raw)
		}
		if rest, ok := strings.CutPrefix(path, "~/"); ok {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, err
			}
			path = filepath.Join(home, rest)
		}
		warnReadableStore(path, o.Log)
		return sqlite.Open(ctx, path, sqlite.Options{NoMigrate: o.NoMigrate, Now: o.Now})
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		st, err := postgres.Open(ctx, raw, postgres.Options{NoMigrate: o.NoMigrate, Log: o.Log})
		if err != nil {
			return nil, RedactErr(raw, fmt.Errorf("store %s: %w", RedactURL(raw), err))
		}
		return st, nil
	}
	return nil, urlErrorf("unknown store %q (want sqlite:PATH or postgres://...)", RedactURL(raw))
}

// ConnectionLost says whether err is a store connection lost mid-call (a
// database restart or failover), where the write may or may not have
// committed. Only PostgreSQL has a connection to lose; SQLite's errors
// are never one.
func ConnectionLost(err error) bool { return postgres.ConnectionLost(err) }
