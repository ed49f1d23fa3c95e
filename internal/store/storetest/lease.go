package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// testLease covers what keeps a drain's lease its own: a later claim is
// another lease, an answer that finds its row taken over is kept as
// evidence, and a row given back without a call keeps its attempt count.
func testLease(t *testing.T, h Harness) {
	ctx := context.Background()
	claim := func(t *testing.T, s store.Store, owner string) store.Claimed {
		t.Helper()
		cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: owner, LeaseFor: 10 * time.Second, Limit: 1}))
		if len(cs) != 1 || cs[0].LeaseUntil == nil {
			t.Fatalf("claimed %+v, want one row with a lease", cs)
		}
		return cs[0]
	}
	// answer is what a drain writes for an accepted call under claim c.
	answer := func(c store.Claimed, keep bool) store.TransitionParams {
		return store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: c.LeaseOwner, LeaseUntil: *c.LeaseUntil,
			KeepIfStale: keep, Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain, Detail: "accepted",
			ProviderID: "wamid.LATE", Attempt: &store.Attempt{Number: c.Attempts, StartedAt: t0, FinishedAt: t0.Add(time.Second),
				Class: "accepted", HTTPStatus: 200, Latency: time.Second}}
	}
	takeOver := func(t *testing.T, s store.Store, id string, ev state.Kind) {
		t.Helper()
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sending,
			Event: state.Event{Kind: ev}, Source: store.SourceReconcile, Detail: "lease expired", MaybeSent: ev == state.LeaseRequeue}))
	}
	// kept checks that the late answer to c is on the row as an attempt
	// and a history entry that changed nothing, and that the row is
	// otherwise as the takeover left it.
	kept := func(t *testing.T, s store.Store, c store.Claimed, want state.State, note string) {
		t.Helper()
		m := must[*store.Message](t)(s.MessageGet(ctx, "", c.ID))
		if m.State != want || m.ProviderID != "" {
			t.Errorf("row after the late answer: %s, provider id %q; want %s, none (the answer is not applied)", m.State, m.ProviderID, want)
		}
		atts := must[[]store.Attempt](t)(s.MessageAttempts(ctx, c.ID))
		if len(atts) != 1 || atts[0].Number != c.Attempts || atts[0].Class != "accepted" || atts[0].HTTPStatus != 200 {
			t.Errorf("attempts: %+v, want the late call's", atts)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, c.ID))
		last := hist[len(hist)-1]
		if last.Applied || last.From != want || last.To != want || last.Event != "accept" || last.Source != store.SourceDrain ||
			!strings.Contains(last.Detail, "not applied: the row moved on before "+c.LeaseOwner) ||
			!strings.Contains(last.Detail, note) || !strings.HasSuffix(last.Detail, ": accepted") {
			t.Errorf("last history entry: %+v; want the late answer, not applied, noting %q", last, note)
		}
	}

	t.Run("a late answer to a row taken over is kept on it as evidence, not applied", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		for _, k := range []string{"one", "many", "locked", "dropped"} {
			p := Params(k)
			must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		}
		one, many, locked, dropped := claim(t, s, "drain-1"), claim(t, s, "drain-1"), claim(t, s, "drain-1"), claim(t, s, "drain-1")
		clk.Advance(10*time.Second + store.TakeoverMargin)
		for _, c := range []store.Claimed{one, many, locked, dropped} {
			takeOver(t, s, c.ID, state.LeaseExpired)
		}

		// One transition, and a batch of drain outcomes.
		p := answer(one, true)
		if _, err := s.MessageTransition(ctx, &p); !errors.Is(err, store.ErrStale) {
			t.Errorf("late answer: %v, want ErrStale", err)
		}
		kept(t, s, one, state.Unknown, "it is unknown")
		res := must[[]store.TransitionResult](t)(s.MessageTransitionMany(ctx, []store.TransitionParams{answer(many, true)}))
		if !errors.Is(res[0].Err, store.ErrStale) {
			t.Errorf("late answer in a batch: %+v, want ErrStale", res[0])
		}
		kept(t, s, many, state.Unknown, "it is unknown")

		// A batch that locks its rows first (it holds a takeover too).
		enq := Params("other")
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &enq))
		other := claim(t, s, "drain-2")
		clk.Advance(10*time.Second + store.TakeoverMargin)
		res = must[[]store.TransitionResult](t)(s.MessageTransitionMany(ctx, []store.TransitionParams{
			answer(locked, true),
			{ID: other.ID, From: state.Sending, Event: state.Event{Kind: state.LeaseExpired}, Source: store.SourceReconcile},
		}))
		if !errors.Is(res[0].Err, store.ErrStale) || res[1].Err != nil {
			t.Errorf("late answer beside a takeover: %+v", res)
		}
		kept(t, s, locked, state.Unknown, "it is unknown")

		// Without KeepIfStale a lost race writes nothing, as before.
		p = answer(dropped, false)
		if _, err := s.MessageTransition(ctx, &p); !errors.Is(err, store.ErrStale) {
			t.Errorf("late answer without KeepIfStale: %v, want ErrStale", err)
		}
		if atts := must[[]store.Attempt](t)(s.MessageAttempts(ctx, dropped.ID)); len(atts) != 0 {
			t.Errorf("without KeepIfStale the attempt was written: %+v", atts)
		}
	})

	t.Run("an answer under an earlier claim never lands on a later claim by the same drain", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("k")
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		first := claim(t, s, "drain-1")
		if m := must[*store.Message](t)(s.MessageGet(ctx, "", first.ID)); m.LeaseUntil == nil || !m.LeaseUntil.Equal(*first.LeaseUntil) {
			t.Fatalf("claimed lease_until %v, stored %v: a claim must return the lease it wrote", first.LeaseUntil, m.LeaseUntil)
		}
		// The drain freezes; reconcile queues the row again (the provider
		// deduplicates by key) and the same drain, awake, claims it anew.
		clk.Advance(10*time.Second + store.TakeoverMargin)
		takeOver(t, s, first.ID, state.LeaseRequeue)
		clk.Advance(time.Second)
		second := claim(t, s, "drain-1")
		if second.ID != first.ID || second.LeaseUntil.Equal(*first.LeaseUntil) {
			t.Fatalf("second claim %+v", second)
		}
		old := answer(first, true)
		if _, err := s.MessageTransition(ctx, &old); !errors.Is(err, store.ErrStale) {
			t.Fatalf("the first claim's answer on the second claim: %v, want ErrStale", err)
		}
		m := must[*store.Message](t)(s.MessageGet(ctx, "", first.ID))
		if m.State != state.Sending || !m.LeaseUntil.Equal(*second.LeaseUntil) || m.ProviderID != "" {
			t.Errorf("the second claim's row after the first's answer: %s, lease %v, provider id %q", m.State, m.LeaseUntil, m.ProviderID)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, first.ID))
		if last := hist[len(hist)-1]; last.Applied || !strings.Contains(last.Detail, "under a later lease of the same drain") {
			t.Errorf("last history entry: %+v", last)
		}
		// The second claim's own answer applies.
		cur := answer(second, true)
		if got := must[*store.Message](t)(s.MessageTransition(ctx, &cur)); got.State != state.Sent || got.ProviderID != "wamid.LATE" {
			t.Errorf("the second claim's answer: %s %q", got.State, got.ProviderID)
		}
	})

	t.Run("a row given back without a call keeps its attempt count and last error, and says why", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("k")
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		c := claim(t, s, "drain-1")
		const provErr = `{"error":{"code":131000,"message":"Something went wrong"}}`
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: "drain-1",
			LeaseUntil: *c.LeaseUntil, Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, LastError: provErr,
			Attempt: &store.Attempt{Number: 1, StartedAt: t0, FinishedAt: t0, Class: "transient", HTTPStatus: 500}}))
		c = claim(t, s, "drain-1")
		if c.Attempts != 2 {
			t.Fatalf("second claim counts attempt %d, want 2", c.Attempts)
		}
		const why = "lease check: 0.4s of the 10s lease left by the wall clock; the call needs 2s (call timeout) + 1s: given back without a call"
		got := must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: "drain-1",
			LeaseUntil: *c.LeaseUntil, KeepIfStale: true, Event: state.Event{Kind: state.Retry}, NoCall: true, Source: store.SourceDrain,
			Detail: why}))
		if got.State != state.Queued || got.Attempts != 1 || got.LastError != provErr || got.LeaseOwner != "" {
			t.Errorf("given back: %s, %d attempts, last error %q, lease %q; want queued, 1, the provider's, none", got.State, got.Attempts, got.LastError, got.LeaseOwner)
		}
		if atts := must[[]store.Attempt](t)(s.MessageAttempts(ctx, c.ID)); len(atts) != 1 {
			t.Errorf("%d attempts, want the one real call", len(atts))
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, c.ID))
		if last := hist[len(hist)-1]; !last.Applied || last.From != state.Sending || last.To != state.Queued || last.Detail != why {
			t.Errorf("last history entry: %+v", last)
		}
	})
}
