package cli

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// The vital signs that warn before an incident (key conflicts, long sends,
// failures by reason, resends and maybe_sent rows, sends without
// downstream progress) and the queue that cannot drain from here, as stats
// shows them (table, JSON, Prometheus) and health checks them. Kept in this file, apart from cmd_stats.go's older figures.

// unsendableQueue is one identity whose queued rows no drain in this
// environment can send: it is not configured, or its token is not set
// here. Field names are a JSON contract.
type unsendableQueue struct {
	Identity string `json:"identity"`
	Queued   int    `json:"queued"`
	Why      string `json:"why"`
}

// progressIdentities are the identities whose webhooks msgq receives
// (app_secret_env or webhook_secret_env configured): only their accepted
// sends can be expected to report delivered or read.
func progressIdentities(ids map[string]*identity) []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		if c := ids[n].Config; c.AppSecretEnv != "" || c.WebhookSecretEnv != "" {
			out = append(out, n)
		}
	}
	return out
}

// unsendable lists, by name, the identities with queued rows that cannot
// be sent from this environment.
func unsendable(ids map[string]*identity, counts []store.StateCount) []unsendableQueue {
	out := []unsendableQueue{}
	for _, c := range counts {
		if c.State != state.Queued || c.N == 0 {
			continue
		}
		id := ids[c.Identity]
		switch {
		case id == nil:
			out = append(out, unsendableQueue{c.Identity, c.N, "not configured"})
		case len(id.missingSendEnv()) > 0:
			out = append(out, unsendableQueue{c.Identity, c.N, strings.Join(id.missingSendEnv(), ", ") + " not set"})
		}
	}
	slices.SortFunc(out, func(a, b unsendableQueue) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// vitalRows are the table lines of the vital signs.
func vitalRows(s *store.Stats, un []unsendableQueue) [][]string {
	v := s.VitalStats
	win := human(s.Window)
	var failures []string
	for _, r := range store.FailureReasons {
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
		{"sending over " + human(store.LongSending), strconv.Itoa(v.SendingLong)},
		{"failed (last " + win + ")", strings.Join(failures, ", ")},
		{"resends", fmt.Sprintf("%d (last %s: %d)", v.Resends, win, v.RecentResends)},
		{"maybe sent", maybe},
		{"sent without progress after " + human(v.NoProgressAfter) + " (last " + win + ")", progress},
		{"queued, cannot send from here", cant},
	}
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
func registerVitals(reg *prometheus.Registry, s *store.Stats, un []unsendableQueue) {
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

// vitalThresholds are health's thresholds on the vital signs: the config
// key (also the flag, with dashes) and what it limits. All are counts.
var vitalThresholds = []struct{ name, help string }{
	{"max_key_conflicts", "key conflicts within --window"},
	{"max_sending_long", "rows in sending claimed more than 1m ago (lease expired or not)"},
	{"max_failed_permanent", "rows failed as permanent within --window"},
	{"max_failed_expired", "rows failed as expired within --window"},
	{"max_failed_exhausted", "rows failed as exhausted within --window"},
	{"max_failed_canceled", "rows canceled within --window"},
	{"max_failed_resolved", "rows resolved as failed within --window"},
	{"max_resends", "resends made within --window"},
	{"max_maybe_sent", "rows flagged maybe_sent with no delivered or read status"},
	{"max_sent_without_progress", "sent rows of one identity (whose webhooks msgq receives) without a status after --no-progress-after, sent within --window"},
	{"max_unsendable", "queued rows of identities that cannot send from here (not configured, or token not set)"},
}

// vitalCheck measures one of vitalThresholds against s; ok is false for a
// name that is not one of them.
func vitalCheck(name string, limit int64, s *store.Stats, un []unsendableQueue) (value int64, msg string, ok bool) {
	v := s.VitalStats
	win := human(s.Window)
	if reason, found := strings.CutPrefix(name, "max_failed_"); found {
		n := int64(v.RecentFailures[reason])
		return n, fmt.Sprintf("%s failed as %s in the last %s (max %d)", nRows(n), reason, win, limit), true
	}
	switch name {
	case "max_key_conflicts":
		return v.RecentKeyConflicts, fmt.Sprintf("%d key conflict(s) in the last %s: a key was reused with another body (max %d)",
			v.RecentKeyConflicts, win, limit), true
	case "max_sending_long":
		n := int64(v.SendingLong)
		return n, fmt.Sprintf("%s in sending for over %s, each a possible duplicate (max %d)", nRows(n), human(store.LongSending), limit), true
	case "max_resends":
		n := int64(v.RecentResends)
		return n, fmt.Sprintf("%d resend(s) in the last %s (max %d)", n, win, limit), true
	case "max_maybe_sent":
		n := int64(0)
		for st, c := range v.MaybeSent {
			if st != string(state.Delivered) && st != string(state.Read) {
				n += int64(c)
			}
		}
		return n, fmt.Sprintf("%s flagged maybe_sent with no delivered or read status (max %d)", nRows(n), limit), true
	case "max_sent_without_progress":
		// The worst identity decides; the message names every one over.
		var worst int64
		var over []string
		for _, p := range v.SentProgress {
			worst = max(worst, int64(p.WithoutProgress))
			if int64(p.WithoutProgress) > limit {
				over = append(over, fmt.Sprintf("%s %d of %d", p.Identity, p.WithoutProgress, p.Sent))
			}
		}
		return worst, fmt.Sprintf("sent rows without a delivered or read status after %s (last %s): %s (max %d per identity)",
			human(v.NoProgressAfter), win, strings.Join(over, ", "), limit), true
	case "max_unsendable":
		var n int64
		var parts []string
		for _, u := range un {
			n += int64(u.Queued)
			parts = append(parts, fmt.Sprintf("%s %d (%s)", u.Identity, u.Queued, u.Why))
		}
		return n, fmt.Sprintf("%s queued for identities that cannot send from here: %s (max %d)", nRows(n), strings.Join(parts, ", "), limit), true
	}
	return 0, "", false
}

// vitalWindows are health's --window and --no-progress-after, parsed
// (empty: the defaults).
func vitalWindows(h healthSettings) (window, noProgress time.Duration, err error) {
	window, noProgress = store.DefaultStatsWindow, store.DefaultNoProgressAfter
	for _, f := range []struct {
		flag, key, v string
		dst          *time.Duration
	}{{"window", "window", h.Window, &window}, {"no-progress-after", "no_progress_after", h.NoProgressAfter, &noProgress}} {
		if f.v == "" {
			continue
		}
		d, err := parseAge(f.v)
		if err != nil || d <= 0 {
			return 0, 0, usagef("--%s (health.%s) %q: want a positive duration like 1h or 1d", f.flag, f.key, f.v)
		}
		*f.dst = d
	}
	return window, noProgress, nil
}
