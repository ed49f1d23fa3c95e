//go:build full

package cli_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestAChallengeFallsBackOnlyWhenTheFirstStepWentNowhere is issue 16's
// proof on both stores, with real drains against `msgq sim serve` and
// its delivery log as the oracle: an accepted email ends the challenge
// (the SMS never goes out); a bounced one releases the SMS at its time,
// delivered once; a mail whose answer was lost (unknown) blocks the SMS,
// shown as blocked, unless --accept-duplicate-risk; --supersedes
// cancels the old challenge's queued step. Bad input writes nothing.
func TestAChallengeFallsBackOnlyWhenTheFirstStepWentNowhere(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e, base := challengeEnv(t, kind)

		e.refused(2, `^msgq: give one --then-text per --then`, "send", "--key", "bad", "--identity", "mail", "--to", "a@example.com",
			"--subject", "S", "--text", "t", "--expires-in", "1m", "--then", "sms-us:+15551230000", "--then-after", "1s")
		e.refused(2, `^msgq: a challenge needs a deadline`, "send", "--key", "bad", "--identity", "mail", "--to", "a@example.com",
			"--subject", "S", "--text", "t", "--then", "sms-us:+15551230000", "--then-text", "t", "--then-after", "1s")
		e.refused(2, `^msgq: steps\[2\]\.after: must be before the deadline\n$`, "send", "--key", "bad", "--identity", "mail", "--to", "a@example.com",
			"--subject", "S", "--text", "t", "--expires-in", "1m", "--then", "sms-us:+15551230000", "--then-text", "t", "--then-after", "2m")
		e.refused(2, `^msgq: step 2 \(sms-us:nope\): invalid phone number "nope"`, "send", "--key", "bad", "--identity", "mail", "--to", "a@example.com",
			"--subject", "S", "--text", "t", "--expires-in", "1m", "--then", "sms-us:nope", "--then-text", "t", "--then-after", "1s")
		if rs := e.rows(); len(rs) != 0 {
			t.Fatalf("bad input wrote %d rows", len(rs))
		}

		// Step 2 may go at 10s: long enough for the first drain below to
		// take every step 1 even on a loaded machine (a race-built drain
		// on PostgreSQL under load took over 4s; a step 1 still queued at
		// that time is canceled and its fallback released, by design),
		// short enough to wait for. The deadline is far past it, so that
		// a loaded machine's slow drains still meet it.
		sendChallenge(e, "ok-1", "ada@example.com", "+15551230001", "10s", "5m")
		sendChallenge(e, "bounce-1", "bounce+b@example.com", "+15551230002", "10s", "5m")
		sendChallenge(e, "drop-1", "drop+c@example.com", "+15551230003", "10s", "5m")
		sendChallenge(e, "drop-2", "drop+d@example.com", "+15551230004", "10s", "5m", "--accept-duplicate-risk")
		// A replay is the same challenge; other steps are a conflict (exit 3).
		if out := sendChallenge(e, "ok-1", "ada@example.com", "+15551230001", "10s", "5m"); !strings.Contains(out, "replayed") {
			t.Errorf("replay: %q", out)
		}
		e.refused(3, `ok-1`, "send", "--key", "ok-1", "--identity", "mail", "--to", "ada@example.com", "--subject", "Your code",
			"--text", "Your code is 999999", "--expires-in", "5m", "--then", "sms-us:+15551230001", "--then-text", "Your code is 999999", "--then-after", "10s")

		e.drainUntil("the SMS fallbacks", func() bool {
			return e.get("bounce-1/2").State == state.Sent && e.get("drop-2/2").State == state.Sent &&
				e.challenge("drop-1").Blocked == 1
		})
		// Once more, past every release time: nothing else goes out.
		e.drainUntil("the accepted challenge to complete", func() bool { return e.challenge("ok-1").Outcome == "completed" })

		got := deliveredTo(t, base)
		want := map[string]int{"ada@example.com": 1, "bounce+b@example.com": 0, "drop+c@example.com": 1, "drop+d@example.com": 1,
			"+15551230001": 0, "+15551230002": 1, "+15551230003": 0, "+15551230004": 1}
		for to, n := range want {
			if got[to] != n {
				t.Errorf("%s: %d deliveries, want %d (all: %v)", to, got[to], n, got)
			}
		}
		ok := e.challenge("ok-1")
		if ok.By != 1 || ok.Steps[1].Message.State != state.Failed || ok.Steps[1].Message.Reason != state.Canceled {
			t.Errorf("ok-1: by %d, step 2 %s(%s)", ok.By, ok.Steps[1].Message.State, ok.Steps[1].Message.Reason)
		}
		if c := e.challenge("bounce-1"); c.Outcome != "completed" || c.By != 2 || !c.Steps[1].Released {
			t.Errorf("bounce-1: %s by %d", c.Outcome, c.By)
		}
		show := e.run("show", "drop-1")
		if !strings.Contains(show, "open, blocked by step 1") || !strings.Contains(show, "held: fallback to step 2 held: step 1 is unknown") {
			t.Errorf("show of the blocked challenge:\n%s", show)
		}
		if m := e.get("drop-1/2"); m.State != state.Queued || m.Attempts != 0 {
			t.Errorf("drop-1's SMS: %s after %d attempts", m.State, m.Attempts)
		}
		// Steps are ordinary rows: list shows every one, and stuck the
		// uncertain emails (before their deadline they need a person).
		keys := map[string]string{}
		for _, r := range e.rows() {
			keys[r.Key] = r.State
		}
		if len(keys) != 8 || keys["drop-1/2"] != "queued" || keys["bounce-1/2"] != "sent" || keys["ok-1/2"] != "failed" {
			t.Errorf("list: %v, want the 8 steps with their states", keys)
		}
		var stuck []stuckJSON
		e.jsonOut(0, &stuck, "stuck", "--older-than", "0s")
		if ks := stuckKeys(stuck); len(ks) != 2 || !slices.Contains(ks, "drop-1") || !slices.Contains(ks, "drop-2") {
			t.Errorf("stuck lists %v, want the unknown emails drop-1 and drop-2", ks)
		}

		// Supersedes: the new code's challenge cancels the old one's SMS
		// that has not gone out, in the same transaction.
		out := sendChallenge(e, "drop-1-g2", "ada+g2@example.com", "+15551230003", "4s", "1m", "--supersedes", "drop-1")
		if !strings.Contains(out, "superseded drop-1: 1 step(s)") {
			t.Errorf("supersede: %q", out)
		}
		if c := e.challenge("drop-1"); c.Outcome != "superseded" || c.Steps[1].Message.Reason != state.Canceled {
			t.Errorf("drop-1 after supersede: %s, step 2 %s", c.Outcome, c.Steps[1].Message.Reason)
		}
		hist := e.history(e.get("drop-1/2").ID)
		if last := hist[len(hist)-1]; last.Event != "cancel" || !strings.Contains(last.Detail, "superseded by challenge drop-1-g2") {
			t.Errorf("drop-1/2's last history entry %+v", last)
		}
		e.drainUntil("the new generation's email", func() bool { return e.get("drop-1-g2").State == state.Sent })
		if n := deliveredTo(t, base)["+15551230003"]; n != 0 {
			t.Errorf("the superseded SMS went out %d times", n)
		}
		var stats struct {
			Challenges store.ChallengeVitals `json:"challenges"`
		}
		e.jsonOut(0, &stats, "stats")
		if v := stats.Challenges; v.FallbacksFired != 2 || v.SupersedingSends != 1 || v.Superseded != 1 || v.CompletedByStep["2"] != 2 {
			t.Errorf("stats challenges %+v", v)
		}
	})
}

// TestAChallengeCallsNothingAtOrAfterItsDeadline: an email step whose
// answer was lost blocks the SMS until the deadline; then the challenge
// expires and the SMS is canceled, never called. Nobody knows whether the
// email reached the customer, so it stays in stuck (issue 24: it used to
// drop out), marked past its deadline so that no resend is offered, and
// keeps maybe_sent, until a person resolves it.
func TestAChallengeCallsNothingAtOrAfterItsDeadline(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		e, base := challengeEnv(t, kind)
		// The email must have been tried (its answer lost: unknown) before
		// the deadline, even on a loaded machine: 6s, the SMS at 3s.
		sendChallenge(e, "late-1", "drop+x@example.com", "+15551239999", "3s", "6s")
		e.drainUntil("the deadline", func() bool { return e.challenge("late-1").Outcome == "expired" })
		c := e.challenge("late-1")
		if m := c.Steps[1].Message; m.State != state.Failed || m.Attempts != 0 {
			t.Errorf("the SMS step: %s(%s) after %d attempts, want failed without a call", m.State, m.Reason, m.Attempts)
		}
		if n := deliveredTo(t, base)["+15551239999"]; n != 0 {
			t.Errorf("the SMS went out %d times after the deadline", n)
		}
		if m := e.get("late-1"); m.State != state.Unknown || !m.MaybeSent {
			t.Errorf("the email step: %s, maybe_sent %v; want still unknown, maybe_sent", m.State, m.MaybeSent)
		}
		var stuck []stuckJSON
		e.jsonOut(4, &stuck, "stuck", "--older-than", "0s", "--fail-if-any")
		if len(stuck) != 1 || stuck[0].Key != "late-1" || stuck[0].State != "unknown" || !stuck[0].PastDeadline || !stuck[0].MaybeSent {
			t.Fatalf("stuck past the deadline: %+v; want late-1, unknown, past_deadline, maybe_sent", stuck)
		}
		stdout, stderr, code := e.try("stuck", "--older-than", "0s")
		if code != 0 || !regexp.MustCompile(`(?m)^`+stuck[0].ID+` +late-1 +unknown \(past deadline\) +- +mail `).MatchString(stdout) ||
			!strings.Contains(stderr, "stuck: 1 row(s) past their deadline: a resend would arrive too late;") {
			t.Errorf("stuck's table past the deadline: exit %d\n%s%s", code, stdout, stderr)
		}
		// Reconcile cannot look an email up: it stays for a person, who
		// resolves it; then it leaves stuck.
		e.jsonOut(0, new(reconcileJSON), "reconcile")
		e.jsonOut(4, &stuck, "stuck", "--older-than", "0s", "--fail-if-any")
		e.run("resolve", "late-1", "--as", "failed", "--note", "customer never got the code", "--by", "ops")
		e.jsonOut(0, &stuck, "stuck", "--older-than", "0s")
		if len(stuck) != 0 {
			t.Errorf("stuck lists %v once the step was resolved", stuckKeys(stuck))
		}

		// The canceled SMS step resent with a new code and a deadline of
		// its own (rule 6): a single send linked to the step, delivered once.
		e.run("resend", "late-1/2", "--key", "late-1-r2", "--text", "Your code is 654321", "--expires-in", "10m")
		r := e.get("late-1-r2")
		if r.ResendOf != c.Steps[1].Message.ID || r.Payload.Text != "Your code is 654321" || r.ExpiresAt == nil || !r.ExpiresAt.After(*c.Deadline) {
			t.Errorf("the resend: resend_of %q, text %q, expires %v; want the step's id, the new code, a deadline after the challenge's %v",
				r.ResendOf, r.Payload.Text, r.ExpiresAt, c.Deadline)
		}
		e.drainUntil("the resend", func() bool { return e.get("late-1-r2").State == state.Sent })
		if n := deliveredTo(t, base)["+15551239999"]; n != 1 {
			t.Errorf("the resent SMS went out %d times, want once", n)
		}
	})
}
