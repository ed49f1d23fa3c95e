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
	clk := storetest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg := sim.DefaultConfig()
	cfg.Now, cfg.StatusDelay = clk.Now, time.Hour
	sm := sim.New(cfg)
	srv := httptest.NewServer(sm.Handler())
	t.Cleanup(func() { srv.Close(); sm.Close() })
	tw := func() provider.Provider {
		return twilio.New(twilio.Config{BaseURL: srv.URL, AccountSID: "AC" + strings.Repeat("0a", 16), AuthToken: "t", From: "+15005550006"})
	}
	ids := map[string]*reconcile.Identity{"sms-us": {Kind: tw, Missing: func() []string { return nil },
		Provider: func() (provider.Provider, error) { return tw(), nil }}}

	// claimed enqueues key to to with text, claims it, and makes the call
	// its drain made before it vanished (the answer never recorded).
	claimed := func(key, to, text string) *store.Message {
		t.Helper()
		p := store.EnqueueParams{Key: key, To: to, Channel: store.ChannelSMS, Identity: "sms-us", Payload: store.Payload{Text: text}}
		if _, err := st.MessageEnqueue(ctx, &p); err != nil {
			t.Fatal(err)
		}
		cs, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: 10 * time.Second, Limit: 1})
		if err != nil || len(cs) != 1 {
			t.Fatalf("claim %s: %v %+v", key, err, cs)
		}
		if r := tw().Send(ctx, &provider.Message{ID: cs[0].ID, To: to, Channel: store.ChannelSMS, Payload: p.Payload}); r.Class != retry.Accepted {
			t.Fatalf("send %s: %+v", key, r)
		}
		return &cs[0].Message
	}
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
