package cli

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// The vital signs that warn before an incident (key conflicts, long sends,
// failures by reason, resends and maybe_sent rows, sends without
// downstream progress) and the queue that cannot drain from here, as stats
// shows them (table, JSON, Prometheus) and health checks them. Kept in this file, apart from cmd_stats.go's older figures.

// progressIdentities are the identities whose webhooks msgq receives
// (app_secret_env, webhook_secret_env or auth_token_env configured) and
// carry statuses (a twilio identity's only with a status_callback,
// provider.ProgressReporter): only their accepted sends can be expected to
// report delivered or read.
func progressIdentities(ids map[string]*identities.Identity) []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		id := ids[n]
		if !id.ReceivesWebhooks() {
			continue
		}
		if pr, ok := id.Settings.(provider.ProgressReporter); ok && !pr.ReportsProgress() {
			continue
		}
		out = append(out, n)
	}
	return out
}

// unsendable lists, by name, the identities with queued rows that cannot
// be sent from this environment.
func unsendable(ids map[string]*identities.Identity, counts []store.StateCount) []health.Unsendable {
	out := []health.Unsendable{}
	for _, c := range counts {
		if c.State != state.Queued || c.N == 0 {
			continue
		}
		id := ids[c.Identity]
		switch {
		case id == nil:
			out = append(out, health.Unsendable{Identity: c.Identity, Queued: c.N, Why: "not configured"})
		case len(id.MissingSendEnv()) > 0:
			out = append(out, health.Unsendable{Identity: c.Identity, Queued: c.N, Why: strings.Join(id.MissingSendEnv(), ", ") + " not set"})
		}
	}
	slices.SortFunc(out, func(a, b health.Unsendable) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// vitalRows are the table lines of the vital signs.
func vitalRows(s *store.Stats, un []health.Unsendable) [][]string {
	v := s.VitalStats
	win := duration.Human(s.Window)
	var failures []string
	for _, r := range store.FailureReasons {
		// Only the SQL intake's admission fails a row as invalid
		// (docs/sql-enqueue.md): said when it has.
		if r == state.Invalid && v.RecentFailures[string(r)] == 0 {
			continue
		}
		failures = append(failures, fmt.Sprintf("%s %d", r, v.RecentFailures[string(r)]))
	}
	maybe := strconv.Itoa(sumCounts(v.MaybeSent))
	if len(v.MaybeSent) > 0 {
		var parts []string
		for _, st := range state.All {
			if n := v.MaybeSent[string(st)]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", st, n))
			}
		}
		maybe += " (" + strings.Join(parts, ", ") + ")"
	}
	progress := "none (no identity's webhooks are configured)"
	if len(v.SentProgress) > 0 {
		var parts []string
		for _, p := range v.SentProgress {
			parts = append(parts, fmt.Sprintf("%s %d of %d", p.Identity, p.WithoutProgress, p.Sent))
		}
		progress = strings.Join(parts, ", ")
	}
	cant := "0"
	if len(un) > 0 {
		var parts []string
		n := 0
		for _, u := range un {
			n += u.Queued
			parts = append(parts, fmt.Sprintf("%s %d: %s", u.Identity, u.Queued, u.Why))
		}
		cant = fmt.Sprintf("%d (%s)", n, strings.Join(parts, "; "))
	}
	return [][]string{
		{"key conflicts", fmt.Sprintf("%d (last %s: %d)", v.KeyConflicts, win, v.RecentKeyConflicts)},
		{"key replays (last " + win + ")", strconv.FormatInt(v.RecentKeyReplays, 10)},
		{"sending over " + duration.Human(store.LongSending), strconv.Itoa(v.SendingLong)},
		{"failed (last " + win + ")", strings.Join(failures, ", ")},
		{"resends", fmt.Sprintf("%d (last %s: %d)", v.Resends, win, v.RecentResends)},
		{"maybe sent", maybe},
		{"sent without progress after " + duration.Human(v.NoProgressAfter) + " (last " + win + ")", progress},
		{"queued, cannot send from here", cant},
		{"challenges", challengeLine(v.Challenges)},
		{"challenges (last " + win + ")", recentChallengeLine(v.Challenges)},
	}
}

// challengeLine sums up the verification challenges (docs/challenges.md).
func challengeLine(c store.ChallengeVitals) string {
	steps := make([]string, 0, len(c.CompletedByStep))
	for k := range c.CompletedByStep {
		steps = append(steps, k)
	}
	slices.Sort(steps)
	by := make([]string, 0, len(steps))
	for _, k := range steps {
		by = append(by, fmt.Sprintf("step %s: %d", k, c.CompletedByStep[k]))
	}
	completed := strconv.Itoa(sumCounts(c.CompletedByStep))
	if len(by) > 0 {
		completed += " (" + strings.Join(by, ", ") + ")"
	}
	return fmt.Sprintf("%d open (%d blocked by an uncertain step), %s completed, %d expired, %d failed, %d superseded; "+
		"%d fallbacks fired, %d superseding sends, %d unknown past the deadline",
		c.Open, c.Blocked, completed, c.Expired, c.Failed, c.Superseded, c.FallbacksFired, c.SupersedingSends, c.UnknownPastDeadline)
}

// recentChallengeLine sums up the challenges' figures of the window.
func recentChallengeLine(c store.ChallengeVitals) string {
	first := fmt.Sprintf("%d first delivered", c.RecentFirstDeliveries)
	if c.RecentFirstDeliveries > 0 {
		first += fmt.Sprintf(" (creation to first delivery: p50 %s, p95 %s)", duration.Human(c.FirstDeliveryP50), duration.Human(c.FirstDeliveryP95))
	}
	return fmt.Sprintf("%s, %d expired", first, c.RecentExpired)
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// registerVitals adds the vital signs to stats' Prometheus registry. Names
// follow Prometheus' conventions (promlint runs over them in
// internal/cli/stats_vitals_test.go): counters since the store was created
// end in _total, figures of the window start with msgq_recent_, and units
// are seconds.
func registerVitals(reg *prometheus.Registry, s *store.Stats, un []health.Unsendable) {
	v := s.VitalStats
	counter := func(name, help string, n float64) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(c)
		c.Add(n)
	}
	gauge := func(name, help string, n float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
		reg.MustRegister(g)
		g.Set(n)
	}
	counter("msgq_key_conflicts_total", "Sends refused because their key holds another body (the unique index refused the write), since the store was created.",
		float64(v.KeyConflicts))
	gauge("msgq_recent_key_conflicts", "Key conflicts within the window (msgq_stats_window_seconds), to the minute.", float64(v.RecentKeyConflicts))
	gauge("msgq_recent_key_replays", "Key replays within the window (msgq_stats_window_seconds), to the minute.", float64(v.RecentKeyReplays))
	gauge("msgq_sending_long", "Messages in sending claimed more than 60 seconds ago, lease expired or not: each may become a duplicate.",
		float64(v.SendingLong))
	counter("msgq_resends_total", "Messages made by msgq resend, since the store was created.", float64(v.Resends))
	gauge("msgq_recent_resends", "Messages made by msgq resend within the window.", float64(v.RecentResends))
	ch := v.Challenges
	gauge("msgq_challenges_open", "Verification challenges still open (docs/challenges.md).", float64(ch.Open))
	gauge("msgq_challenge_fallbacks_blocked", "Open challenges whose next step is held back by an earlier step that is sending or unknown.", float64(ch.Blocked))
	counter("msgq_challenges_expired_total", "Challenges whose deadline passed with no step completed, since the store was created.", float64(ch.Expired))
	counter("msgq_challenge_fallbacks_fired_total", "Later challenge steps released, since the store was created.", float64(ch.FallbacksFired))
	counter("msgq_challenge_superseding_sends_total", "Challenges sent with --supersedes (a user asked for a new code), since the store was created.",
		float64(ch.SupersedingSends))
	gauge("msgq_challenge_unknown_past_deadline", "Challenge steps in unknown whose deadline has passed: out of msgq stuck, each a possible prompt nobody can check.",
		float64(ch.UnknownPastDeadline))
	gauge("msgq_recent_challenges_expired", "Challenges whose deadline passed within the window with no step completed.", float64(ch.RecentExpired))
	gauge("msgq_recent_challenge_first_deliveries", "Challenges whose first delivered evidence (of any step) came within the window.",
		float64(ch.RecentFirstDeliveries))
	gauge("msgq_recent_challenge_first_delivery_p50_seconds", "Of msgq_recent_challenge_first_deliveries, the median time from the challenge's creation to that evidence.",
		ch.FirstDeliveryP50.Seconds())
	gauge("msgq_recent_challenge_first_delivery_p95_seconds", "Of msgq_recent_challenge_first_deliveries, the 95th percentile of the time from the challenge's creation to that evidence.",
		ch.FirstDeliveryP95.Seconds())
	byStep := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgq_challenges_completed_total",
		Help: "Challenges completed, by the step that completed them, since the store was created."}, []string{"step"})
	reg.MustRegister(byStep)
	for k, n := range ch.CompletedByStep {
		byStep.WithLabelValues(k).Add(float64(n))
	}
	gauge("msgq_no_progress_after_seconds", "How long a sent message may wait for a delivered or read status before msgq_recent_sent_without_progress counts it.",
		v.NoProgressAfter.Seconds())

	failures := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_recent_failures",
		Help: "Messages that became failed within the window, by reason."}, []string{"reason"})
	maybe := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_maybe_sent_messages",
		Help: "Messages flagged maybe_sent (an earlier call's answer was lost), by state."}, []string{"state"})
	sent := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_recent_sent",
		Help: "Messages of identities whose webhooks msgq receives that became sent within the window, at least msgq_no_progress_after_seconds ago."},
		[]string{"identity"})
	stalled := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_recent_sent_without_progress",
		Help: "Of msgq_recent_sent, the messages still sent: no delivered, read or failed status came (the provider accepts, nothing arrives)."},
		[]string{"identity"})
	cant := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgq_queued_unsendable",
		Help: "Queued messages of identities that cannot send from where stats ran (not configured, or the token is not set)."},
		[]string{"identity"})
	reg.MustRegister(failures, maybe, sent, stalled, cant)
	for _, r := range store.FailureReasons {
		failures.WithLabelValues(string(r)).Set(float64(v.RecentFailures[string(r)]))
	}
	// Every state, zeros included, so a series does not vanish.
	for _, st := range state.All {
		maybe.WithLabelValues(string(st)).Set(float64(v.MaybeSent[string(st)]))
	}
	for _, p := range v.SentProgress {
		sent.WithLabelValues(p.Identity).Set(float64(p.Sent))
		stalled.WithLabelValues(p.Identity).Set(float64(p.WithoutProgress))
	}
	for _, u := range un {
		cant.WithLabelValues(u.Identity).Set(float64(u.Queued))
	}
}
