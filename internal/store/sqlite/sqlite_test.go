package sqlite_test

import (
	"context"
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
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Now: now})
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
