package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
)

// openStore opens the store a --store value names. noMigrate leaves the
// schema alone (msgq migrate applies it itself and reports what it did).
func openStore(ctx context.Context, raw string, noMigrate bool) (store.Store, error) {
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
		return sqlite.Open(ctx, path, sqlite.Options{NoMigrate: noMigrate})
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return nil, usagef("store %s: PostgreSQL is %v (use sqlite:PATH)", redactURL(raw), errNotSupported)
	}
	return nil, usagef("unknown store %q (want sqlite:PATH or postgres://...)", redactURL(raw))
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
