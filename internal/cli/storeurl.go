package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
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
		st, err := postgres.Open(ctx, raw, postgres.Options{NoMigrate: noMigrate})
		if err != nil {
			// The driver's message may quote the URL; never print its password.
			return nil, fmt.Errorf("store %s: %s", redactURL(raw), strings.ReplaceAll(err.Error(), passwordOf(raw), "xxxxx"))
		}
		return st, nil
	}
	return nil, usagef("unknown store %q (want sqlite:PATH or postgres://...)", redactURL(raw))
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
