package reconcile_test

import (
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/reconcile"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

// TestRunFindsARowWhoseDrainVanishedMidCall: a Twilio row whose drain
// vanished after its call reached Twilio (no answer, no SID, no attempt
// recorded) becomes unknown on its expired lease and is then found by
// listing the recipient's messages around its claim: settled as sent,
// keeping the SID. Its twin (the same text to the same number, twice at
// Twilio) is left unknown; nothing is sent.
func TestRunFindsARowWhoseDrainVanishedMidCall(t *testing.T) {
	t.Parallel()
	f := newFindEnv(t)
	st, clk, sm, ids := f.st, f.clk, f.sm, f.ids
	claimed := func(key, to, text string) *store.Message { t.Helper(); return f.claimed(t, key, to, text) }
	lone := claimed("lone", "+15551230001", "Your code is 111111")
	claimed("twin-1", "+15551230002", "Your code is 222222")
	claimed("twin-2", "+15551230002", "Your code is 222222")
	clk.Advance(10*time.Second + store.TakeoverMargin)

	res, err := reconcile.Run(ctx, reconcile.Config{Store: st, Limit: 100, CallTimeout: 5 * time.Second, Identities: ids})
	if err != nil {
		t.Fatal(err)
	}
	changed, left := summary(res)
	wantChanged := []string{"lone sending->unknown", "lone unknown->sent", "twin-1 sending->unknown", "twin-2 sending->unknown"}
	if !slices.Equal(changed, wantChanged) || len(left) != 2 ||
		!strings.Contains(left[0], "twin-1: its drain vanished mid-call: the call may have reached the phone; no provider id, and the provider lists 2 messages") ||
		!strings.Contains(left[1], "twin-2: its drain vanished mid-call: the call may have reached the phone; no provider id, and the provider lists 2 messages") {
		t.Errorf("changed %q\nwant    %q\nleft %q", changed, wantChanged, left)
	}
	m, err := st.MessageGet(ctx, "", lone.ID)
	if err != nil {
		t.Fatal(err)
	}
	ds := sm.Deliveries()
	if m.State != state.Sent || len(ds) != 3 || m.ProviderID != ds[0].ID {
		t.Errorf("lone: %s with provider id %q (deliveries %+v), want sent with its SID and nothing sent again", m.State, m.ProviderID, ds)
	}
}

// findEnv is a SQLite store and the simulator's Twilio API over HTTP,
// with an identity sms-us of provider twilio, on a clock the test moves.
type findEnv struct {
	st  *sqlite.Store
	clk *storetest.Clock
	sm  *sim.Sim
	tw  func() provider.Provider
	ids map[string]*reconcile.Identity
}

func newFindEnv(t *testing.T) *findEnv {
	t.Helper()
	f := &findEnv{clk: storetest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f.st = st
	cfg := sim.DefaultConfig()
	cfg.Now, cfg.StatusDelay = f.clk.Now, time.Hour
	f.sm = sim.New(cfg)
	srv := httptest.NewServer(f.sm.Handler())
	t.Cleanup(func() { srv.Close(); f.sm.Close() })
	f.tw = func() provider.Provider {
		return twilio.New(twilio.Config{BaseURL: srv.URL, AccountSID: "AC" + strings.Repeat("0a", 16), AuthToken: "t", From: "+15005550006"})
	}
	f.ids = map[string]*reconcile.Identity{"sms-us": {Kind: f.tw, Missing: func() []string { return nil },
		Provider: func() (provider.Provider, error) { return f.tw(), nil }}}
	return f
}

// claimedOnly enqueues key to to with text and claims it: its drain
// vanishes before the call reaches Twilio.
func (f *findEnv) claimedOnly(t *testing.T, key, to, text string) *store.Message {
	t.Helper()
	p := store.EnqueueParams{Key: key, To: to, Channel: store.ChannelSMS, Identity: "sms-us", Payload: store.Payload{Text: text}}
	if _, err := f.st.MessageEnqueue(ctx, &p); err != nil {
		t.Fatal(err)
	}
	cs, err := f.st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: 10 * time.Second, Limit: 1})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim %s: %v %+v", key, err, cs)
	}
	return &cs[0].Message
}

// claimed is claimedOnly, and the call its drain made before it vanished
// (the answer never recorded).
func (f *findEnv) claimed(t *testing.T, key, to, text string) *store.Message {
	t.Helper()
	m := f.claimedOnly(t, key, to, text)
	if r := f.tw().Send(ctx, &provider.Message{ID: m.ID, To: to, Channel: store.ChannelSMS, Payload: *m.Payload}); r.Class != retry.Accepted {
		t.Fatalf("send %s: %+v", key, r)
	}
	return m
}

// TestRunSettlesNeitherRowAMessageBothCouldBe: two rows with one text to
// one number, both unknown without a SID, and one message at Twilio
// (one call never got there): no other row records it, yet it could be
// either's, so neither is settled on it, and each note names the other.
func TestRunSettlesNeitherRowAMessageBothCouldBe(t *testing.T) {
	t.Parallel()
	f := newFindEnv(t)
	a := f.claimedOnly(t, "a", "+15551230003", "Your code is 333333")
	b := f.claimed(t, "b", "+15551230003", "Your code is 333333")
	f.clk.Advance(10*time.Second + store.TakeoverMargin)
	res, err := reconcile.Run(ctx, reconcile.Config{Store: f.st, Limit: 100, CallTimeout: 5 * time.Second, Identities: f.ids})
	if err != nil {
		t.Fatal(err)
	}
	changed, left := summary(res)
	sid := f.sm.Deliveries()[0].ID
	if !slices.Equal(changed, []string{"a sending->unknown", "b sending->unknown"}) || len(left) != 2 ||
		!strings.Contains(left[0], sid+" (no row; also matches unknown b / "+b.ID+"): the one no row owns matches another unknown row too") ||
		!strings.Contains(left[1], sid+" (no row; also matches unknown a / "+a.ID+")") {
		t.Errorf("changed %q\nleft %q", changed, left)
	}
	for _, m := range []*store.Message{a, b} {
		if got, err := f.st.MessageGet(ctx, "", m.ID); err != nil || got.State != state.Unknown || got.ProviderID != "" {
			t.Errorf("%s: %+v %v, want unknown without a SID", m.Key, got, err)
		}
	}
}
