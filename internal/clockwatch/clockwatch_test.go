package clockwatch_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/clockwatch"
	"github.com/msgq/msgq/internal/store/sqlite"
)

// A host whose clock runs 5 s ahead of the store's: after one measurement
// Now is the store's clock, and the offset is reported once on stderr.
func TestAWatchCorrectsToTheStoresClockAndWarnsOnce(t *testing.T) {
	ctx := context.Background()
	storeClock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Now: func() time.Time { return storeClock }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	host := func() time.Time { return storeClock.Add(5 * time.Second) }
	var stderr bytes.Buffer
	w := clockwatch.New(clockwatch.Config{Store: st, Host: host, WarnAt: 2 * time.Second, Role: "drain",
		Stderr: &stderr, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if got := w.Now(); !got.Equal(host()) {
		t.Errorf("before any measurement Now is %v, want the host's %v", got, host())
	}
	for range 2 {
		if err := w.Measure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Now(); !got.Equal(storeClock) {
		t.Errorf("after a measurement Now is %v, want the store's %v", got, storeClock)
	}
	if n := strings.Count(stderr.String(), "this host's clock is 5s ahead of the store's"); n != 1 {
		t.Errorf("warned %d times, want once: %q", n, stderr.String())
	}
}

// Within the threshold nothing is said.
func TestASmallOffsetIsNotReported(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var stderr bytes.Buffer
	w := clockwatch.New(clockwatch.Config{Store: st, Host: time.Now, WarnAt: 2 * time.Second, Role: "reconcile", NoRecord: true,
		Stderr: &stderr, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := w.Measure(ctx); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 {
		t.Errorf("a host on the store's clock was reported: %q", stderr.String())
	}
}
