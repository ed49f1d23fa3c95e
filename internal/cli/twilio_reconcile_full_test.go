//go:build full

package cli_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/state"
)

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
