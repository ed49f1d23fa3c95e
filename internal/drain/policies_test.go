package drain_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/store"
)

// A window is closed to a recipient who never wrote, never enforced for an
// identity without one, and open when the store cannot say (the provider's
// own refusal is the backstop), with a warning.
func TestStoreWindowIsClosedOnlyWhenTheStoreSaysSo(t *testing.T) {
	ctx := context.Background()
	s := setup(t, 0, nil)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	windows := map[string]time.Duration{"wa": 24 * time.Hour}
	closed := drain.StoreWindow(s, func(id string) time.Duration { return windows[id] }, time.Now, log)
	if !closed(ctx, "wa", "+15550000001") {
		t.Errorf("the window of a recipient who never wrote is open")
	}
	if closed(ctx, "sim", "+15550000001") {
		t.Errorf("an identity without a window has a closed one")
	}
	s.Close()
	if closed(ctx, "wa", "+15550000001") || !strings.Contains(logs.String(), "sending as if open") {
		t.Errorf("a store that cannot answer closed the window (log %q)", logs.String())
	}
}

// countingHolds counts the reads of the real store's holds.
type countingHolds struct {
	drain.HoldStore
	reads int
}

func (c *countingHolds) TemplateHolds(ctx context.Context) ([]store.TemplateHold, error) {
	c.reads++
	return c.HoldStore.TemplateHolds(ctx)
}

// The holds are read once per HoldsReadEvery however many sends ask.
func TestStoreTemplateHoldsAreReadAtMostEveryFewSeconds(t *testing.T) {
	ctx := context.Background()
	s := setup(t, 0, nil)
	st := &countingHolds{HoldStore: s}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	held := drain.StoreTemplateHolds(st, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	for range 100 {
		if _, ok := held(ctx, "wa", "order_update", "en"); ok {
			t.Fatal("a template with no hold is held")
		}
	}
	now = now.Add(drain.HoldsReadEvery + time.Millisecond)
	held(ctx, "wa", "order_update", "en")
	if st.reads != 2 {
		t.Errorf("%d reads of the holds for 101 sends over one interval, want 2", st.reads)
	}
}
