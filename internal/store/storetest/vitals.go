package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// testVitals checks the figures of store.VitalStats that the CLI's known
// queue (internal/cli/stats_vitals_test.go) does not pin down: conflicts
// within one batch, the per-minute counts' window and their pruning, and
// the edges of the no-progress span.
func testVitals(t *testing.T, h Harness) {
	ctx := context.Background()

	t.Run("key conflicts are counted, in a batch too, and by the minute", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		first := Params("k")
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &first))
		other := Params("k")
		other.Payload.Params = []string{"Bob", "1001"}
		if _, err := s.MessageEnqueue(ctx, &other); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("enqueue another body: %v, want a conflict", err)
		}
		// A batch: a conflict with the stored row, a new row, and a
		// second line of the new row's key with another body.
		again := Params("k2")
		again.Payload.Params = []string{"Bob", "1002"}
		res := must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, []store.EnqueueParams{other, Params("k2"), again, first}))
		if !errors.Is(res[0].Err, store.ErrConflict) || res[1].Err != nil || !errors.Is(res[2].Err, store.ErrConflict) || !res[3].Replayed {
			t.Fatalf("batch results %+v", res)
		}
		st := must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{}))
		if st.KeyConflicts != 3 || st.RecentKeyConflicts != 3 || st.KeyReplays != 1 || st.RecentKeyReplays != 1 {
			t.Errorf("conflicts %d (recent %d), replays %d (recent %d); want 3 (3), 1 (1)",
				st.KeyConflicts, st.RecentKeyConflicts, st.KeyReplays, st.RecentKeyReplays)
		}
		// Two hours on: the running totals stay, the last hour has none;
		// a conflict then counts in the window of the minute it came in.
		clk.Advance(2 * time.Hour)
		if _, err := s.MessageEnqueue(ctx, &other); !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
		st = must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{}))
		if st.KeyConflicts != 4 || st.RecentKeyConflicts != 1 || st.RecentKeyReplays != 0 {
			t.Errorf("two hours on: conflicts %d, recent %d, recent replays %d; want 4, 1, 0", st.KeyConflicts, st.RecentKeyConflicts, st.RecentKeyReplays)
		}
		st = must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{Window: 3 * time.Hour}))
		if st.RecentKeyConflicts != 4 {
			t.Errorf("a 3h window: recent conflicts %d, want 4", st.RecentKeyConflicts)
		}
		// Past CountBuckets the old minutes are dropped as new ones come;
		// the running total keeps them.
		clk.Advance(store.CountBuckets + time.Hour)
		if _, err := s.MessageEnqueue(ctx, &other); !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
		st = must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{Window: 30 * 24 * time.Hour}))
		if st.KeyConflicts != 5 || st.RecentKeyConflicts != 1 {
			t.Errorf("past the buckets' span: conflicts %d, recent %d in 30 days; want 5, 1", st.KeyConflicts, st.RecentKeyConflicts)
		}
	})

	t.Run("sent progress counts the rows sent in the window and at least the span ago", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		sendAt := func(key string, delivered bool) {
			t.Helper()
			p := Params(key)
			p.Identity = "hooked"
			m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
			if cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "d", LeaseFor: time.Minute, Limit: 1})); len(cs) != 1 {
				t.Fatalf("claimed %d", len(cs))
			}
			must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sending, LeaseOwner: "d",
				Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain}))
			if delivered {
				must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sent,
					Event: state.Event{Kind: state.Evidence, Status: state.Delivered}, Source: store.SourceWebhook}))
			}
		}
		sendAt("a", false) // t0
		sendAt("b", true)
		clk.Advance(10 * time.Minute)
		sendAt("c", false) // t0+10m
		clk.Advance(10 * time.Minute)
		sendAt("d", false) // t0+20m: too recent at t0+25m with a 15m span
		clk.Advance(5 * time.Minute)
		progress := func(p store.StatsParams) string {
			t.Helper()
			return fmt.Sprintf("%+v", must[*store.Stats](t)(s.Stats(ctx, &p)).SentProgress)
		}
		if got, want := progress(store.StatsParams{ProgressIdentities: []string{"hooked", "quiet"}}),
			"[{Identity:hooked Sent:3 WithoutProgress:2} {Identity:quiet Sent:0 WithoutProgress:0}]"; got != want {
			t.Errorf("sent progress %s, want %s", got, want)
		}
		// The window starts after a and b were sent.
		if got, want := progress(store.StatsParams{Window: 20 * time.Minute, ProgressIdentities: []string{"hooked"}}),
			"[{Identity:hooked Sent:1 WithoutProgress:1}]"; got != want {
			t.Errorf("a 20m window: sent progress %s, want %s", got, want)
		}
		if got, want := progress(store.StatsParams{NoProgressAfter: time.Minute, ProgressIdentities: []string{"hooked"}}),
			"[{Identity:hooked Sent:4 WithoutProgress:3}]"; got != want {
			t.Errorf("a 1m span: sent progress %s, want %s", got, want)
		}
		if got := progress(store.StatsParams{}); got != "[]" {
			t.Errorf("asked about no identity: %s", got)
		}
	})
}
