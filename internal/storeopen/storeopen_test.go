package storeopen_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

// TestOpenSQLiteByURL: a sqlite: URL opens (and migrates) a real store at
// the path it names, with or without the // form.
func TestOpenSQLiteByURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, raw := range []string{"sqlite:" + filepath.Join(dir, "a.db"), "sqlite://" + filepath.Join(dir, "b.db")} {
		st, err := storeopen.Open(context.Background(), raw, storeopen.Options{})
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		if _, err := st.Stats(context.Background(), &store.StatsParams{Now: time.Now()}); err != nil {
			t.Fatalf("Stats on %q: %v", raw, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a.db", "b.db"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no store file %s: %v", name, err)
		}
	}
}

// TestOpenRefusesBadURLsWithoutShowingThePassword: an unknown scheme or a
// sqlite: URL with no file is a URLError (the CLI maps it to exit 2), and
// its message never carries the password.
func TestOpenRefusesBadURLsWithoutShowingThePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"mysql://u:HUNTER2@h/db", "sqlite:", "sqlite://"} {
		_, err := storeopen.Open(context.Background(), raw, storeopen.Options{})
		var ue *storeopen.URLError
		if !errors.As(err, &ue) {
			t.Fatalf("Open(%q) = %v, want a *URLError", raw, err)
		}
		if strings.Contains(err.Error(), "HUNTER2") {
			t.Errorf("Open(%q): %q shows the password", raw, err)
		}
	}
}

// TestOpenPostgresErrorIsRedacted: a refused PostgreSQL login comes back
// without the password, and is not taken for a lost connection.
func TestOpenPostgresErrorIsRedacted(t *testing.T) {
	base := os.Getenv("MSGQ_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("MSGQ_TEST_POSTGRES_URL not set")
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("msgq_no_such_user", "HUNTER2")
	raw := u.String()
	_, err = storeopen.Open(context.Background(), raw, storeopen.Options{})
	if err == nil {
		t.Fatalf("Open(%s) with a user that does not exist succeeded", storeopen.RedactURL(raw))
	}
	if strings.Contains(err.Error(), "HUNTER2") {
		t.Errorf("error shows the password: %q", err)
	}
	if !strings.Contains(err.Error(), "xxxxx") {
		t.Errorf("error does not name the redacted store: %q", err)
	}
}
