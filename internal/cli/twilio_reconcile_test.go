package cli_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/state"
)

// TestReconcileFindsTwilioRowsWithoutASID: every answer of the
// simulator's Twilio API is lost after the message was accepted, so the
// drain leaves each row unknown with no SID. Reconcile lists the
// recipient's messages (the simulator answers Twilio's list endpoint, in
// its own process, over HTTP) and settles only a row with exactly one
// match, keeping the SID it found; two rows with one text to one number,
// and a row Twilio never got, are left unknown with a note saying why.
// Nothing is sent again, and a second run changes nothing.
func TestReconcileFindsTwilioRowsWithoutASID(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t, "--fault-drop", "1", "--status-delay", "1h")
		cfg := fmt.Sprintf("identities:\n  sms-us: {provider: twilio, base_url: %s, account_sid_env: MSGQ_TEST_TWILIO_SID, auth_token_env: MSGQ_TEST_TWILIO_TOKEN, from: \"+15005550006\"}\n", sim)
		e := newOpEnv(t, kind, cfg)
		e.env = append(e.env, "MSGQ_TEST_TWILIO_SID=AC"+strings.Repeat("0a", 16), "MSGQ_TEST_TWILIO_TOKEN=test-token")
		never := e.unknown("never-1", "sms-us", "", "") // its call never reached Twilio
		e.run("send", "--key", "lost-1", "--identity", "sms-us", "--to", "+15551230001", "--text", "Your code is 111111")
		e.run("send", "--key", "twin-1", "--identity", "sms-us", "--to", "+15551230002", "--text", "Your code is 222222")
		e.run("send", "--key", "twin-2", "--identity", "sms-us", "--to", "+15551230002", "--text", "Your code is 222222")
		e.try("drain")
		for _, key := range []string{"lost-1", "twin-1", "twin-2"} {
			if m := e.get(key); m.State != state.Unknown || m.ProviderID != "" {
				t.Fatalf("%s after the drain: %s, provider id %q; want unknown without a SID", key, m.State, m.ProviderID)
			}
		}
		if n := len(deliveries(t, sim)); n != 3 {
			t.Fatalf("%d deliveries, want the 3 calls", n)
		}

		var out reconcileJSON
		e.jsonOut(0, &out, "reconcile")
		changed, left := out.summary()
		if !slices.Equal(changed, []string{"lost-1 unknown->sent"}) {
			t.Errorf("changed %v, want lost-1 settled alone", changed)
		}
		if len(left) != 3 || !strings.Contains(left[0], "never-1: no provider id, and the provider lists no message that matches it") ||
			!strings.Contains(left[1], "twin-1: no provider id, and the provider lists 2 messages that match it") ||
			!strings.Contains(left[2], "twin-2: no provider id, and the provider lists 2 messages that match it") {
			t.Errorf("unresolved %q, want never-1 (no match) and both twins (2 matches)", left)
		}
		m := e.get("lost-1")
		if m.State != state.Sent || !strings.HasPrefix(m.ProviderID, "SM") || len(m.ProviderID) != 34 {
			t.Errorf("lost-1: %s with provider id %q, want sent with the SID found", m.State, m.ProviderID)
		}
		h := e.history(m.ID)
		if last := h[len(h)-1]; last.Source != "reconcile" || last.Event != "evidence(sent)" ||
			!strings.Contains(last.Detail, "provider search (no provider id): one message matches it, "+m.ProviderID+`, status "sent"`) {
			t.Errorf("lost-1's last history entry %+v", last)
		}
		for _, key := range []string{"twin-1", "twin-2"} {
			if m := e.get(key); m.State != state.Unknown || m.ProviderID != "" {
				t.Errorf("%s: %s, provider id %q; want unknown as it was", key, m.State, m.ProviderID)
			}
		}
		if m := e.get(never.ID); m.State != state.Unknown {
			t.Errorf("never-1: %s, want unknown", m.State)
		}
		if n := len(deliveries(t, sim)); n != 3 {
			t.Errorf("%d deliveries after reconcile, want still 3: it sends nothing", n)
		}

		var again reconcileJSON
		e.jsonOut(0, &again, "reconcile")
		if changed, left := again.summary(); len(changed) != 0 || len(left) != 3 {
			t.Errorf("a second run: changed %v, left %v; want nothing changed and the same 3 left", changed, left)
		}
	})
}
