package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// FixtureC946b42 checks a store made by msgq at commit c946b42 (each
// store's testdata/c946b42 fixture: k1 and k2 sent by the simulator, k3
// queued for an hour later) once the current code has migrated it: its
// rows read back as they were, a replay of k1 is still a replay, and it
// takes new work from enqueue through claim to sent. now is the store's
// clock at the call (the fixture's rows were made on 2026-12-02).
func FixtureC946b42(t *testing.T, s store.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for key, want := range map[string]state.State{"k1": state.Sent, "k2": state.Sent, "k3": state.Queued} {
		m, err := s.MessageGet(ctx, "", key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if m.State != want {
			t.Errorf("%s is %s, want %s", key, m.State, want)
		}
		hist, err := s.MessageHistory(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) == 0 || hist[0].To != state.Queued || hist[len(hist)-1].To != want {
			t.Errorf("%s history: %+v", key, hist)
		}
	}
	p := Params("k4")
	res, err := s.MessageEnqueue(ctx, &p)
	if err != nil || res.Replayed {
		t.Fatalf("enqueue of a new key on the migrated store: %+v, %v", res, err)
	}
	if again, err := s.MessageEnqueue(ctx, &p); err != nil || !again.Replayed || again.Message.ID != res.Message.ID {
		t.Fatalf("replay on the migrated store: %+v, %v", again, err)
	}
	cs, err := s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	// k4 is due; k3 was queued for an hour after the fixture was made, so
	// it is claimed too once that hour has passed (the fixture's times are
	// fixed, the test's clock is not), and never before.
	var k4 *store.Claimed
	for i, c := range cs {
		switch {
		case c.Key == "k4":
			k4 = &cs[i]
		case c.Key == "k3" && !c.NextAttemptAt.After(now):
		default:
			t.Fatalf("claim on the migrated store took %s (due %s, now %s), want k4 and k3 only once due", c.Key, c.NextAttemptAt, now)
		}
	}
	if k4 == nil {
		t.Fatalf("claim on the migrated store: %+v, want k4", cs)
	}
	m, err := s.MessageTransition(ctx, &store.TransitionParams{ID: k4.ID, From: state.Sending, LeaseOwner: "drain-1",
		LeaseUntil: *k4.LeaseUntil, Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain,
		ProviderID: "wamid.k4", Attempt: &store.Attempt{Number: k4.Attempts, Class: "ok", StartedAt: now, FinishedAt: now}})
	if err != nil || m.State != state.Sent {
		t.Fatalf("accept on the migrated store: %+v, %v", m, err)
	}
	st, err := s.Stats(ctx, &store.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	by := map[state.State]int{}
	for _, c := range st.Counts {
		by[c.State] += c.N
	}
	// k3: queued, or sending once the claim above took it.
	if by[state.Sent] != 3 || by[state.Queued]+by[state.Sending] != 1 || st.KeyReplays < 1 {
		t.Errorf("stats on the migrated store: %+v, %d replays", st.Counts, st.KeyReplays)
	}
}

// DuplicateDeliveriesMigrated checks a store that held the same webhook
// delivery twice (ids, each with body) before webhook dedupe keys were
// kept (0021), once migrated: both copies are still there, as they came
// and with no key (a partial unique index leaves them out, so the
// migration could not fail on them), and a delivery stored now with a key
// is kept once however often it comes.
func DuplicateDeliveriesMigrated(t *testing.T, s store.Store, ids []string, body []byte) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		ev, err := s.WebhookGet(ctx, id)
		if err != nil {
			t.Fatalf("delivery %s after the migration: %v", id, err)
		}
		if string(ev.Body) != string(body) || ev.DedupeKey != "" {
			t.Errorf("delivery %s after the migration: %+v, want its body and no key", id, ev)
		}
	}
	for range 3 {
		evs := []store.WebhookEvent{{Provider: store.WebhookWhatsApp, Identity: "shop", Body: body, DedupeKey: "body:migrated", Items: 1}}
		if err := s.WebhookStore(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	pend, err := s.WebhookPending(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != len(ids)+1 {
		t.Errorf("%d deliveries pending, want the %d old copies and one new", len(pend), len(ids))
	}
	if st, err := s.WebhookStats(ctx); err != nil || st.ReplayedWebhooks != 2 {
		t.Errorf("stats %+v, %v; want 2 replays", st, err)
	}
}
