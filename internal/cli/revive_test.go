package cli_test

import (
	"fmt"
	"testing"

	"github.com/msgq/msgq/internal/state"
)

// TestARefusedSendIsRevivedOnceTheRecipientOptsInAndGoesOutOnce: a send to
// a recipient opted out of the identity fails as opted_out with no call;
// sending the same key again while they are opted out replays the failure;
// once `opt-outs remove` lifts it, the same send revives that row (the
// same id, queued again, revived in -o json), and the drain delivers it
// exactly once through the simulator's API, in its own process.
func TestARefusedSendIsRevivedOnceTheRecipientOptsInAndGoesOutOnce(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t)
		e := newOpEnv(t, kind, fmt.Sprintf("identities:\n  api: {provider: http, base_url: %s, token_env: MSGQ_TEST_TOKEN}\n", sim))
		const to = "+15551234567"
		e.run("opt-outs", "add", "--identity", "api", "--to", to, "--by", "ops")
		send := []string{"send", "--identity", "api", "--key", "promo-1", "--to", to, "--text", "20% off today"}
		var first sendJSON
		e.jsonOut(0, &first, send...)
		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		if m := e.get("promo-1"); m.State != state.Failed || m.Reason != state.OptedOut || m.Attempts != 0 {
			t.Fatalf("after the first drain: %s(%s), %d attempts; want failed(opted_out) with none", m.State, m.Reason, m.Attempts)
		}

		var replay sendJSON
		e.jsonOut(0, &replay, send...)
		if !replay.Replayed || replay.Revived || replay.ID != first.ID || replay.State != "failed" {
			t.Errorf("sent again while opted out: %+v, want a replay of the failure", replay)
		}

		e.run("opt-outs", "remove", "--identity", "api", "--to", to, "--by", "ops")
		var rev sendJSON
		e.jsonOut(0, &rev, send...)
		if !rev.Revived || rev.Replayed || rev.ID != first.ID || rev.State != "queued" {
			t.Fatalf("sent again after the opt-in: %+v, want the row revived", rev)
		}
		e.refused(3, `^msgq: key "promo-1" is already used by message `+first.ID+` with a different body`,
			"send", "--identity", "api", "--key", "promo-1", "--to", to, "--text", "30% off today")
		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("second drain: exit %d: %s", code, errs)
		}
		m := e.get("promo-1")
		if m.State != state.Sent || m.Attempts != 1 || m.ProviderID == "" {
			t.Errorf("after the drain: %s, %d attempts, provider id %q; want sent after one call", m.State, m.Attempts, m.ProviderID)
		}
		var revive bool
		for _, h := range e.history(m.ID) {
			revive = revive || (h.Event == "revive(opted_out)" && h.From == state.Failed && h.To == state.Queued && h.Source == "send")
		}
		if !revive {
			t.Errorf("history %+v has no revive from send", e.history(m.ID))
		}
		if ds := deliveries(t, sim); len(ds) != 1 || ds[0].To != to {
			t.Errorf("deliveries %+v, want one to %s", ds, to)
		}
	})
}

type sendJSON struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Replayed bool   `json:"replayed"`
	Revived  bool   `json:"revived"`
}
