package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// optOut records that Params' recipient opted out of (or, out false, in
// to) the identity sim at at.
func optOut(t *testing.T, s store.Store, out bool, at time.Time) {
	t.Helper()
	if _, err := s.SetOptOut(context.Background(), store.OptOutParams{Identity: "sim", Recipient: Params("").To, OptedOut: out,
		Source: "operator", At: at}); err != nil {
		t.Fatal(err)
	}
}

// refuse claims the one queued row id and fails it as the drain does when
// its recipient opted out: opted_out, before any call (the claim's attempt
// given back).
func refuse(t *testing.T, s store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1}))
	if len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("claimed %+v, want %s", cs, id)
	}
	m := must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sending, LeaseOwner: "drain-1",
		Event: state.Event{Kind: state.Fail, Reason: state.OptedOut}, NoCall: true, Source: store.SourceDrain,
		Detail: "refused before any call", LastError: "the recipient opted out"}))
	if m.State != state.Failed || m.Reason != state.OptedOut {
		t.Fatalf("refused row %+v", m)
	}
}

// testRevive: a row refused for a policy reason before any call keeps no
// claim on its key. The same key and body enqueued again while the
// condition holds replays the refusal; once it has lifted (the recipient
// opted in again), the row itself is queued again through the machine's
// revive, scheduled as the new send says, and says so (Revived). A
// different body is still a conflict, and a row that made a call, failed
// for another reason, or lost its content is never revived.
func testRevive(t *testing.T, h Harness) {
	ctx := context.Background()

	t.Run("a refusal replays while the recipient is opted out and revives once they opt in", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		optOut(t, s, true, t0.Add(-time.Hour))
		p := Params("k1")
		first := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		refuse(t, s, first.ID)
		clk.Advance(time.Minute)

		again := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		if !again.Replayed || again.Revived || again.Message.ID != first.ID || again.Message.State != state.Failed {
			t.Fatalf("while opted out: %+v (row %+v), want a replay of the failure", again, again.Message)
		}
		if n := len(must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, first.ID))); n != 3 {
			t.Fatalf("the replay wrote history: %d entries, want 3", n)
		}

		optOut(t, s, false, t0.Add(30*time.Second))
		clk.Advance(time.Minute)
		p.NotBeforeIn, p.ExpiresIn = 5*time.Minute, time.Hour
		rev := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		now := clk.Now().Truncate(store.Resolution)
		m := rev.Message
		if !rev.Revived || rev.Replayed || m.ID != first.ID || m.State != state.Queued || m.Reason != state.NoReason || m.LastError != "" {
			t.Fatalf("after the opt-in: %+v (row %+v), want the row revived", rev, m)
		}
		got := must[*store.Message](t)(s.MessageGet(ctx, "", first.ID))
		if got.State != state.Queued || got.Reason != state.NoReason || got.LastError != "" || got.Attempts != 0 ||
			!got.NextAttemptAt.Equal(now.Add(5*time.Minute)) || got.ExpiresAt == nil || !got.ExpiresAt.Equal(now.Add(time.Hour)) ||
			!got.UpdatedAt.Equal(now) || !got.CreatedAt.Equal(first.CreatedAt) {
			t.Errorf("stored row %+v, want queued, due in 5m, expiring in 1h", got)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, first.ID))
		last := hist[len(hist)-1]
		if len(hist) != 4 || last.From != state.Failed || last.To != state.Queued || last.Event != "revive(opted_out)" ||
			!last.Applied || last.Source != store.SourceSend || last.Detail == "" || !last.At.Equal(now) {
			t.Errorf("history %+v, want a revive entry last", hist)
		}
		if n, _ := s.MessageCount(ctx, &store.ListParams{}, 0); n != 1 {
			t.Errorf("%d rows, want the one revived (no new row)", n)
		}

		// The revived row is a queued row like any other: due when the
		// new send said, claimed once.
		if cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 5})); len(cs) != 0 {
			t.Fatalf("claimed %+v before its not-before", cs)
		}
		clk.Advance(5 * time.Minute)
		if cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 5})); len(cs) != 1 || cs[0].ID != first.ID {
			t.Fatalf("claimed %+v, want the revived row", cs)
		}

		// Sent again meanwhile: a replay of the row as it is now.
		if r := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)); !r.Replayed || r.Revived || r.Message.State != state.Sending {
			t.Errorf("a third send: %+v (row %+v), want a replay", r, r.Message)
		}
		other := Params("k1")
		other.Payload.Params = []string{"Ada", "1002"}
		var ce *store.ConflictError
		if _, err := s.MessageEnqueue(ctx, &other); !errors.As(err, &ce) || ce.ExistingID != first.ID {
			t.Errorf("another body: %v, want a conflict naming %s", err, first.ID)
		}
	})

	t.Run("in a batch the first item of the key revives and the rest replay", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		optOut(t, s, true, t0.Add(-time.Hour))
		p := Params("k1")
		first := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		refuse(t, s, first.ID)
		optOut(t, s, false, t0)
		clk.Advance(time.Minute)
		other := Params("k1")
		other.To = "+15551234599"
		res := must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, []store.EnqueueParams{p, p, other, Params("k2")}))
		if !res[0].Revived || res[0].Replayed || res[0].Message.ID != first.ID || res[0].Message.State != state.Queued {
			t.Errorf("item 0: %+v, want revived", res[0])
		}
		if res[1].Revived || !res[1].Replayed || res[1].Message.ID != first.ID || res[1].Message.State != state.Queued {
			t.Errorf("item 1: %+v, want a replay of the revived row", res[1])
		}
		if !errors.Is(res[2].Err, store.ErrConflict) {
			t.Errorf("item 2: %+v, want a conflict", res[2])
		}
		if res[3].Err != nil || res[3].Revived || res[3].Replayed {
			t.Errorf("item 3: %+v, want a new row", res[3])
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, first.ID))
		if len(hist) != 4 || hist[3].Event != "revive(opted_out)" {
			t.Errorf("history %+v, want one revive", hist)
		}
	})

	t.Run("a row that made a call, failed otherwise, or was purged is not revived", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		optOut(t, s, true, t0.Add(-time.Hour))

		// k-called: a call went out (a definite transient answer), then
		// the second claim found the recipient opted out.
		called := Params("k-called")
		mc := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &called)).Message
		cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1}))
		if len(cs) != 1 {
			t.Fatalf("claimed %+v", cs)
		}
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: mc.ID, From: state.Sending, LeaseOwner: "drain-1",
			Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain,
			Attempt: &store.Attempt{Number: 1, StartedAt: clk.Now(), FinishedAt: clk.Now(), Class: "transient", HTTPStatus: 500}}))
		refuse(t, s, mc.ID)

		canceled := Params("k-canceled")
		mx := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &canceled)).Message
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: mx.ID, From: state.Queued,
			Event: state.Event{Kind: state.Cancel}, Source: store.SourceOperator}))

		optOut(t, s, false, t0)
		clk.Advance(time.Minute)
		for _, p := range []store.EnqueueParams{called, canceled} {
			r := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
			if r.Revived || !r.Replayed || r.Message.State != state.Failed {
				t.Errorf("%s: %+v (row %+v), want a replay of the failure", p.Key, r, r.Message)
			}
		}

		// k-purged: refused before any call, but its content is gone
		// (msgq purge), so there is nothing to send again.
		optOut(t, s, true, t0.Add(time.Minute))
		purged := Params("k-purged")
		mp := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &purged)).Message
		refuse(t, s, mp.ID)
		clk.Advance(time.Minute)
		must[int](t)(s.MessagePurge(ctx, &store.PurgeParams{Before: clk.Now()}))
		optOut(t, s, false, t0.Add(2*time.Minute))
		r := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &purged))
		if r.Revived || !r.Replayed || r.Message.State != state.Failed {
			t.Errorf("purged: %+v (row %+v), want a replay of the failure", r, r.Message)
		}
	})

	t.Run("16 goroutines on 4 handles send a refused key again: one revives it, the rest replay", func(t *testing.T) {
		t.Parallel()
		first := h.New(t, nil)
		optOut(t, first, true, time.Now().Add(-time.Hour))
		p := Params("race-key")
		m := must[*store.EnqueueResult](t)(first.MessageEnqueue(ctx, &p)).Message
		refuse(t, first, m.ID)
		optOut(t, first, false, time.Now().Add(-time.Minute))
		handles := []store.Store{first, h.Reopen(t, first), h.Reopen(t, first), h.Reopen(t, first)}
		const n = 16
		var revived, replayed atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p := Params("race-key")
				r, err := handles[i%len(handles)].MessageEnqueue(ctx, &p)
				switch {
				case err != nil:
					t.Errorf("goroutine %d: %v", i, err)
				case r.Message.ID != m.ID || r.Message.State != state.Queued:
					t.Errorf("goroutine %d: row %+v, want %s queued", i, r.Message, m.ID)
				case r.Revived:
					revived.Add(1)
				case r.Replayed:
					replayed.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if revived.Load() != 1 || replayed.Load() != n-1 {
			t.Errorf("%d revived, %d replayed; want 1 and %d", revived.Load(), replayed.Load(), n-1)
		}
		revives := 0
		for _, e := range must[[]store.HistoryEntry](t)(first.MessageHistory(ctx, m.ID)) {
			if e.Event == "revive(opted_out)" {
				revives++
			}
		}
		if revives != 1 {
			t.Errorf("%d revive entries in history, want 1", revives)
		}
	})
}
