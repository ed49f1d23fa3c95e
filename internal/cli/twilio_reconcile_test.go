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

// TestReconcileStillLooksUpAChallengeStepPastItsDeadline: a challenge's
// SMS step whose answer was lost is unknown when the deadline passes; it
// stays in stuck marked past its deadline (nothing useful can be resent,
// but nobody knows yet whether it arrived), reconcile looks it up and
// settles it from the provider's list, which takes it out of stuck, and
// the fallback step never went out. Both stores.
func TestReconcileStillLooksUpAChallengeStepPastItsDeadline(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t, "--fault-drop", "1", "--status-delay", "1h")
		cfg := fmt.Sprintf("identities:\n  sms-us: {provider: twilio, base_url: %s, account_sid_env: MSGQ_TEST_TWILIO_SID, auth_token_env: MSGQ_TEST_TWILIO_TOKEN, from: \"+15005550006\"}\n", sim)
		e := newOpEnv(t, kind, cfg)
		e.env = append(e.env, "MSGQ_TEST_TWILIO_SID=AC"+strings.Repeat("0a", 16), "MSGQ_TEST_TWILIO_TOKEN=test-token")
		// The first step must have been tried before the deadline, even on
		// a loaded machine: 6s, the fallback at 3s.
		e.run("send", "--key", "late-sms", "--identity", "sms-us", "--to", "+15551280001", "--text", "Your code is 333333",
			"--expires-in", "6s", "--then", "sms-us:+15551280002", "--then-text", "Your code is 333333", "--then-after", "3s")
		e.drainUntil("the deadline", func() bool { return e.challenge("late-sms").Outcome == "expired" })
		if m := e.get("late-sms"); m.State != state.Unknown || !m.MaybeSent {
			t.Fatalf("step 1 past the deadline: %s, maybe_sent %v; want unknown, maybe_sent", m.State, m.MaybeSent)
		}
		var stuck []stuckJSON
		e.jsonOut(0, &stuck, "stuck", "--older-than", "0s")
		if len(stuck) != 1 || stuck[0].Key != "late-sms" || !stuck[0].PastDeadline {
			t.Errorf("stuck past the deadline: %+v, want late-sms marked past_deadline", stuck)
		}
		var out reconcileJSON
		e.jsonOut(0, &out, "reconcile")
		if changed, _ := out.summary(); !slices.Equal(changed, []string{"late-sms unknown->sent"}) {
			t.Errorf("reconcile changed %v, want the past-deadline step settled", changed)
		}
		if m := e.get("late-sms"); m.State != state.Sent || !strings.HasPrefix(m.ProviderID, "SM") {
			t.Errorf("step 1 after reconcile: %s, provider id %q", m.State, m.ProviderID)
		}
		e.jsonOut(0, &stuck, "stuck", "--older-than", "0s")
		if len(stuck) != 0 {
			t.Errorf("stuck lists %v once reconcile settled the step", stuckKeys(stuck))
		}
		got := map[string]int{}
		for _, d := range deliveries(t, sim) {
			got[d.To]++
		}
		if got["+15551280001"] != 1 || got["+15551280002"] != 0 {
			t.Errorf("deliveries %v: want step 1's call once and no fallback", got)
		}
	})
}
