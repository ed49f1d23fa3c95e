package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
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

// redactedError is an error whose message had a store URL's password
// taken out. It keeps the driver's error underneath, so that callers can
// still tell a lost connection from a refusal.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr hides the password of the store URL raw wherever err's
// message shows it: the driver's message may quote the URL.
func redactErr(raw string, err error) error {
	if err == nil {
		return nil
	}
	pw := passwordOf(raw)
	if !strings.Contains(err.Error(), pw) {
		return err
	}
	return &redactedError{strings.ReplaceAll(err.Error(), pw, "xxxxx"), err}
}

// passwordOf returns the password in a URL, or a string that never occurs.
func passwordOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			return p
		}
	}
	return "\x00no-password\x00"
}

// redactURL hides a password in a store URL before it is printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Unparseable: show the scheme only, in case a password is in it.
		scheme, _, _ := strings.Cut(raw, "://")
		return scheme + "://(unparseable)"
	}
	if u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); !has {
		return raw
	}
	return fmt.Sprint(u.Redacted())
}
