package cli_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestADrainKilledMidCallIsWalkedToAResendThatGoesOutOnce follows one
// message the way an operator meets it. A drain claims it and calls
// WhatsApp (`msgq sim serve`, which answers after 3s) and is killed with
// SIGKILL mid-call. The row stays in sending; `stuck` lists it once its
// lease has expired; `reconcile` makes it unknown (WhatsApp does not
// deduplicate, so the call may have gone out); a person resolves it as
// failed and resends it under a new key; a drain sends the resend. The
// simulator's delivery log is checked at each step: the first call may or
// may not be in it (here the kill hangs up during the latency, so it is
// not), the resend is in it exactly once, and the original is never sent
// again.
func TestADrainKilledMidCallIsWalkedToAResendThatGoesOutOnce(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t, "--latency", "3s")
		e := newOpEnv(t, kind, fmt.Sprintf(`default_identity: wa
identities:
  wa: {provider: whatsapp, base_url: %s, phone_number_id: "1000001", token_env: MSGQ_TEST_TOKEN}
`, sim))
		e.run("send", "--key", "order-1001-shipped", "--to", "+15551234567", "--template", "order_update", "--param", "Ada")
		orig := e.get("order-1001-shipped")
		sentTo := func(id string) int {
			n := 0
			for _, d := range deliveries(t, sim) {
				if d.Ref == id {
					n++
				}
			}
			return n
		}

		// The drain claims the row, calls, and is killed before the answer.
		d := e.cmd("drain", "--follow", "--call-timeout", "2s", "--lease", "12s")
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); e.get(orig.ID).State == state.Queued; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				_ = d.Process.Kill()
				t.Fatal("the drain never claimed the row")
			}
		}
		if err := d.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = d.Wait()
		m := e.get(orig.ID)
		if m.State != state.Sending || m.LeaseUntil == nil {
			t.Fatalf("after the kill the row is %s: the drain finished the call first, and the test proved nothing", m.State)
		}
		first := sentTo(orig.ID)
		if first > 1 {
			t.Fatalf("the first call reached the phone %d times", first)
		}

		// While the lease is live the row belongs to its drain: not stuck
		// yet (claimed under a minute ago), reconcile leaves it alone, and
		// a verdict is refused.
		var rs []stuckJSON
		e.jsonOut(0, &rs, "stuck")
		if len(rs) != 0 {
			t.Errorf("stuck with a live lease: %v", stuckKeys(rs))
		}
		var rj reconcileJSON
		e.jsonOut(0, &rj, "reconcile")
		if len(rj.Changed)+len(rj.Unresolved) != 0 {
			t.Errorf("reconcile with a live lease: %+v", rj)
		}
		e.refused(1, `lease is live until`, "resolve", "order-1001-shipped", "--as", "failed", "--note", "x")

		// The lease expires, and the takeover margin passes: stuck lists
		// it (exit 4 for cron).
		time.Sleep(time.Until(m.LeaseUntil.Add(store.TakeoverMargin)) + 100*time.Millisecond)
		e.jsonOut(4, &rs, "stuck", "--fail-if-any")
		if len(rs) != 1 || rs[0].ID != orig.ID || !rs[0].LeaseExpired || rs[0].State != "sending" {
			t.Fatalf("stuck after the lease expired: %+v", rs)
		}

		// Reconcile: WhatsApp does not deduplicate, so unknown, and left
		// for a person. Nothing was sent.
		e.jsonOut(4, &rj, "reconcile", "--fail-if-unresolved")
		if len(rj.Changed) != 1 || rj.Changed[0].ID != orig.ID || rj.Changed[0].From != "sending" || rj.Changed[0].To != "unknown" ||
			len(rj.Unresolved) != 1 || rj.Unresolved[0].ID != orig.ID {
			t.Fatalf("reconcile: %+v", rj)
		}
		if m := e.get(orig.ID); m.State != state.Unknown {
			t.Fatalf("after reconcile: %s", m.State)
		}
		if n := sentTo(orig.ID); n != first {
			t.Fatalf("reconcile: the original reached the phone %d times, was %d", n, first)
		}
		e.jsonOut(0, &rs, "stuck", "--older-than", "0s")
		if len(rs) != 1 || rs[0].State != "unknown" {
			t.Errorf("stuck after reconcile: %+v", rs)
		}

		// A resend now would risk a duplicate; a person finds out and
		// decides first.
		e.refused(1, `--accept-duplicate-risk`, "resend", "order-1001-shipped", "--key", "order-1001-shipped-r2")
		e.run("resolve", "order-1001-shipped", "--as", "failed", "--note", "provider support: never accepted", "--by", "ops")
		if m := e.get(orig.ID); m.State != state.Failed || m.Reason != state.Resolved {
			t.Fatalf("after resolve: %s(%s)", m.State, m.Reason)
		}
		e.jsonOut(0, &rs, "stuck", "--older-than", "0s")
		if len(rs) != 0 {
			t.Errorf("stuck after resolve: %v", stuckKeys(rs))
		}

		var r resendJSON
		e.jsonOut(0, &r, "resend", "order-1001-shipped", "--key", "order-1001-shipped-r2")
		if r.ResendOf != orig.ID || r.State != "queued" {
			t.Fatalf("resend: %+v", r)
		}
		if n := sentTo(r.ID); n != 0 {
			t.Fatalf("the resend reached the phone before any drain: %d", n)
		}

		// A drain sends the resend, once; the original never again.
		e.run("drain")
		for _, again := range []bool{false, true} {
			if n := sentTo(r.ID); n != 1 {
				t.Errorf("the resend reached the phone %d times, want 1", n)
			}
			if n := sentTo(orig.ID); n != first {
				t.Errorf("the original reached the phone %d times, was %d before", n, first)
			}
			if !again {
				e.run("drain")
				e.run("reconcile")
			}
		}
		if m := e.get(r.ID); m.State != state.Sent {
			t.Errorf("the resend is %s, want sent", m.State)
		}
		if m := e.get(orig.ID); m.State != state.Failed || m.Reason != state.Resolved {
			t.Errorf("the original is %s(%s), want failed(resolved)", m.State, m.Reason)
		}
	})
}
