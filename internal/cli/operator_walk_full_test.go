//go:build full

package cli_test

import (
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestADrainKilledMidCallIsWalkedToAResendThatGoesOutOnce follows
// messages the way an operator meets them, one of each kind that does
// not deduplicate by key (mixedIdentities: WhatsApp, Twilio SMS, SMTP
// email), in one queue. A drain claims them and calls (`msgq sim serve`,
// which answers after 3s, a mail after its final ".") and is killed with
// SIGKILL mid-call. The rows stay in sending; `stuck` lists them once
// their lease has expired; `reconcile` makes them unknown (no provider
// deduplicates, so the call may have gone out; Twilio's search finds no
// message, which settles nothing); a person resolves each as failed and
// resends it under a new key; a drain sends the resends. The simulator's
// delivery log is checked at each step: a first call may or may not be in
// it (here the kill hangs up during the latency, so it is not), each
// resend is in it exactly once, and no original is ever sent again.
func TestADrainKilledMidCallIsWalkedToAResendThatGoesOutOnce(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim, smtpPort := serveSimSMTP(t, "--latency", "3s")
		names := []string{"wa", "tw", "mail"}
		e := newOpEnv(t, kind, "identities:\n"+mixedIdentities(sim, smtpPort, "", names...))
		e.env = append(e.env, mixedEnvVars...)
		keys := map[string]string{} // identity -> the original's key
		origs := map[string]*store.Message{}
		for i, name := range names {
			key := fmt.Sprintf("order-100%d-shipped", i+1)
			args := []string{"send", "--key", key, "--identity", name, "--to", mixedTo(name, 4567)}
			switch name {
			case "wa":
				args = append(args, "--template", "order_update", "--param", "Ada")
			case "mail":
				args = append(args, "--subject", "Your order", "--text", "Your order has shipped")
			default:
				args = append(args, "--text", "Your order has shipped")
			}
			e.run(args...)
			keys[name] = key
			origs[name] = e.get(key)
		}
		sentTo := func(id string) int {
			n := 0
			for _, d := range deliveries(t, sim) {
				if d.Ref == id {
					n++
				}
			}
			return n
		}
		ids := func() []string {
			var s []string
			for _, m := range origs {
				s = append(s, m.ID)
			}
			sort.Strings(s)
			return s
		}

		// The drain claims the rows, calls, and is killed before the answers.
		d := e.cmd("drain", "--follow", "--call-timeout", "2s", "--lease", "12s")
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			for deadline := time.Now().Add(30 * time.Second); e.get(origs[name].ID).State == state.Queued; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					_ = d.Process.Kill()
					t.Fatalf("the drain never claimed the %s row", name)
				}
			}
		}
		if err := d.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = d.Wait()
		first := map[string]int{}
		var lease time.Time
		for _, name := range names {
			m := e.get(origs[name].ID)
			if m.State != state.Sending || m.LeaseUntil == nil {
				t.Fatalf("after the kill the %s row is %s: the drain finished the call first, and the test proved nothing", name, m.State)
			}
			if m.LeaseUntil.After(lease) {
				lease = *m.LeaseUntil
			}
			first[name] = sentTo(m.ID)
			if first[name] > 1 {
				t.Fatalf("the first %s call reached the recipient %d times", name, first[name])
			}
		}

		// While the leases are live the rows belong to their drain: not
		// stuck yet (claimed under a minute ago), reconcile leaves them
		// alone, and a verdict is refused.
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
		for _, name := range names {
			e.refused(1, `lease is live until`, "resolve", keys[name], "--as", "failed", "--note", "x")
		}

		// The leases expire, and the takeover margin passes: stuck lists
		// them (exit 4 for cron).
		time.Sleep(time.Until(lease.Add(store.TakeoverMargin)) + 100*time.Millisecond)
		e.jsonOut(4, &rs, "stuck", "--fail-if-any")
		var got []string
		for _, r := range rs {
			if !r.LeaseExpired || r.State != "sending" {
				t.Errorf("stuck after the leases expired: %+v", r)
			}
			got = append(got, r.ID)
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(ids()) {
			t.Fatalf("stuck after the leases expired: %+v", rs)
		}

		// Reconcile: no provider deduplicates, so unknown, and left for a
		// person. Nothing was sent.
		e.jsonOut(4, &rj, "reconcile", "--fail-if-unresolved")
		got = nil
		for _, c := range rj.Changed {
			if c.From != "sending" || c.To != "unknown" {
				t.Errorf("reconcile changed %s: %s -> %s", c.Key, c.From, c.To)
			}
			got = append(got, c.ID)
		}
		sort.Strings(got)
		var left []string
		for _, u := range rj.Unresolved {
			left = append(left, u.ID)
		}
		sort.Strings(left)
		if fmt.Sprint(got) != fmt.Sprint(ids()) || fmt.Sprint(left) != fmt.Sprint(ids()) {
			t.Fatalf("reconcile: %+v", rj)
		}
		for _, name := range names {
			id := origs[name].ID
			if m := e.get(id); m.State != state.Unknown {
				t.Fatalf("after reconcile the %s row is %s", name, m.State)
			}
			if n := sentTo(id); n != first[name] {
				t.Fatalf("reconcile: the %s original reached the recipient %d times, was %d", name, n, first[name])
			}
		}
		e.jsonOut(0, &rs, "stuck", "--older-than", "0s")
		if len(rs) != len(names) {
			t.Errorf("stuck after reconcile: %+v", rs)
		}
		for _, r := range rs {
			if r.State != "unknown" {
				t.Errorf("stuck after reconcile: %+v", r)
			}
		}

		// A resend now would risk a duplicate; a person finds out and
		// decides first.
		resends := map[string]resendJSON{}
		for _, name := range names {
			key, orig := keys[name], origs[name]
			e.refused(1, `--accept-duplicate-risk`, "resend", key, "--key", key+"-r2")
			e.run("resolve", key, "--as", "failed", "--note", "provider support: never accepted", "--by", "ops")
			if m := e.get(orig.ID); m.State != state.Failed || m.Reason != state.Resolved {
				t.Fatalf("%s after resolve: %s(%s)", name, m.State, m.Reason)
			}
			var r resendJSON
			e.jsonOut(0, &r, "resend", key, "--key", key+"-r2")
			if r.ResendOf != orig.ID || r.State != "queued" {
				t.Fatalf("%s resend: %+v", name, r)
			}
			if n := sentTo(r.ID); n != 0 {
				t.Fatalf("the %s resend reached the recipient before any drain: %d", name, n)
			}
			resends[name] = r
		}
		e.jsonOut(0, &rs, "stuck", "--older-than", "0s")
		if len(rs) != 0 {
			t.Errorf("stuck after resolve: %v", stuckKeys(rs))
		}

		// A drain sends the resends, once each; the originals never again.
		e.run("drain")
		for _, again := range []bool{false, true} {
			for _, name := range names {
				if n := sentTo(resends[name].ID); n != 1 {
					t.Errorf("the %s resend reached the recipient %d times, want 1", name, n)
				}
				if n := sentTo(origs[name].ID); n != first[name] {
					t.Errorf("the %s original reached the recipient %d times, was %d before", name, n, first[name])
				}
			}
			if !again {
				e.run("drain")
				e.run("reconcile")
			}
		}
		for _, name := range names {
			if m := e.get(resends[name].ID); m.State != state.Sent {
				t.Errorf("the %s resend is %s, want sent", name, m.State)
			}
			if m := e.get(origs[name].ID); m.State != state.Failed || m.Reason != state.Resolved {
				t.Errorf("the %s original is %s(%s), want failed(resolved)", name, m.State, m.Reason)
			}
		}
	})
}
