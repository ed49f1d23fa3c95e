package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/msgq/msgq/internal/cli"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// statsVitalFields are the -o json fields of stats' vital signs
// (stats_vitals.go); TestStatsAndHealthReportAQueueBuiltToKnownNumbers pins
// them with the others.
var statsVitalFields = []string{"key_conflicts", "recent_key_conflicts", "recent_key_replays", "sending_long",
	"recent_failures_by_reason", "resends", "recent_resends", "maybe_sent_by_state", "sent_progress",
	"no_progress_after_ns", "queued_unsendable"}

// vitalsConfig names the identities of vitalQueue: hooked receives its
// webhooks (so its sent rows are expected to progress), plain does not,
// api's token is not set in the test's environment, and ghost is not
// configured at all.
const vitalsConfig = `log_level: warn
identities:
  hooked: {provider: sim, webhook_secret_env: MSGQ_VITALS_WEBHOOK_SECRET}
  plain: {provider: sim}
  api: {provider: http, base_url: "http://127.0.0.1:9", token_env: MSGQ_VITALS_UNSET_TOKEN}
`

// vitalQueue builds, through the store, a queue whose vital signs are
// known (the window is the default hour):
//
//	key conflicts: 3 (1 two hours ago, 2 now); a replay now
//	failed within the hour: permanent, expired, exhausted, canceled and
//	    resolved, one each (plus a permanent and two cancels 3h ago)
//	sending: claimed 10m ago with a 1m lease (past it), 5m ago with a live
//	    lease, 10s ago: 2 over a minute, 1 past the lease
//	resends: 2, one of them within the hour
//	maybe_sent: queued 1, sent 1, delivered 1
//	hooked: sent 30m ago (then delivered), 30m ago (still sent), 40m ago
//	    (then read), 5m ago (too recent), 2h ago (outside the window):
//	    3 sent, 1 without progress; plain: 1 sent 30m ago, not counted
//	queued: api 2 (no token here), ghost 1 (not configured), sim 1
func vitalQueue(t *testing.T, st store.Store, clk *clock, now time.Time) {
	t.Helper()
	ctx := context.Background()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	enqueue := func(key, identity string, at time.Time, text, resendOf string, expires time.Time) *store.Message {
		t.Helper()
		clk.Set(at)
		p := store.EnqueueParams{Tenant: store.DefaultTenant, Key: key, To: "+15551230000", Channel: store.ChannelWhatsApp,
			Identity: identity, Lane: store.LaneBulk, Payload: store.Payload{Text: text}, ResendOf: resendOf, ExpiresAt: expires}
		res, err := st.MessageEnqueue(ctx, &p)
		if err != nil {
			if strings.HasPrefix(key, "c") && errors.Is(err, store.ErrConflict) {
				return nil
			}
			t.Fatal(err)
		}
		return res.Message
	}
	claim := func(identity string, at time.Time, lease time.Duration, want int) {
		t.Helper()
		clk.Set(at)
		cs, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: lease, Limit: 5, Now: at, Identities: []string{identity}})
		if err != nil || len(cs) != want {
			t.Fatalf("claimed %d %s rows (%v), want %d", len(cs), identity, err, want)
		}
	}
	move := func(m *store.Message, from state.State, ev state.Event, at time.Time, maybeSent bool) {
		t.Helper()
		clk.Set(at)
		p := &store.TransitionParams{ID: m.ID, From: from, Event: ev, Source: store.SourceDrain, Now: at, MaybeSent: maybeSent,
			NextAttemptAt: at}
		switch {
		case from == state.Sending && ev.Kind != state.Resolve:
			p.LeaseOwner = "drain-1"
			p.Attempt = &store.Attempt{Number: 1, StartedAt: at, FinishedAt: at, Class: "accepted"}
		case ev.Kind == state.Cancel || ev.Kind == state.Resolve:
			p.Source = store.SourceOperator
		case ev.Kind == state.Evidence:
			p.Source = store.SourceWebhook
		}
		if _, err := st.MessageTransition(ctx, p); err != nil {
			t.Fatalf("%s %s: %v", m.Key, ev, err)
		}
	}
	// sent takes a new row of identity to sent at at.
	sent := func(key, identity string, at time.Time) *store.Message {
		t.Helper()
		m := enqueue(key, identity, at, "hello "+key, "", time.Time{})
		claim(identity, at, time.Hour, 1)
		move(m, state.Sending, state.Event{Kind: state.Accept}, at, false)
		return m
	}
	failed := func(key string, at time.Time, reason state.Reason) *store.Message {
		t.Helper()
		m := enqueue(key, "sim", at, "hello "+key, "", time.Time{})
		claim("sim", at, time.Hour, 1)
		move(m, state.Sending, state.Event{Kind: state.Fail, Reason: reason}, at, false)
		return m
	}
	canceled := func(m *store.Message, at time.Time) {
		t.Helper()
		move(m, state.Queued, state.Event{Kind: state.Cancel}, at, false)
	}

	// Key conflicts and a replay.
	c1 := enqueue("c1", "sim", ago(3*time.Hour), "first", "", time.Time{})
	canceled(c1, ago(3*time.Hour))
	enqueue("c1", "sim", ago(2*time.Hour), "other", "", time.Time{})
	enqueue("c1", "sim", now, "another", "", time.Time{})
	enqueue("c1", "sim", now, "yet another", "", time.Time{})
	enqueue("c1", "sim", now, "first", "", time.Time{}) // the replay

	// Failures, one of each reason within the hour.
	pOld := failed("p-old", ago(3*time.Hour), state.Permanent)
	p1 := failed("p1", ago(20*time.Minute), state.Permanent)
	enqueue("e1", "sim", ago(20*time.Minute), "hello e1", "", ago(19*time.Minute))
	claim("sim", ago(10*time.Minute), time.Hour, 0) // e1 is past its deadline: failed as expired
	failed("x1", ago(15*time.Minute), state.Exhausted)
	canceled(enqueue("k1", "sim", ago(15*time.Minute), "hello k1", "", time.Time{}), ago(15*time.Minute))
	r1 := enqueue("r1", "sim", ago(15*time.Minute), "hello r1", "", time.Time{})
	claim("sim", ago(15*time.Minute), time.Hour, 1)
	move(r1, state.Sending, state.Event{Kind: state.Ambiguous}, ago(15*time.Minute), false)
	move(r1, state.Unknown, state.Event{Kind: state.Resolve, Status: state.Failed}, ago(14*time.Minute), false)

	// Resends: one 3h ago (canceled), one a minute ago (sent).
	canceled(enqueue("rs-old", "sim", ago(3*time.Hour), "again", pOld.ID, time.Time{}), ago(3*time.Hour))
	rs := enqueue("rs-new", "sim", ago(time.Minute), "again", p1.ID, time.Time{})
	claim("sim", ago(time.Minute), time.Hour, 1)
	move(rs, state.Sending, state.Event{Kind: state.Accept}, ago(time.Minute), false)

	// maybe_sent: retried with the same key after a lost answer, then sent,
	// then delivered.
	for _, k := range []string{"m1", "m3"} {
		m := enqueue(k, "sim", ago(30*time.Minute), "hello "+k, "", time.Time{})
		claim("sim", ago(30*time.Minute), time.Hour, 1)
		move(m, state.Sending, state.Event{Kind: state.Retry}, ago(30*time.Minute), true)
		claim("sim", ago(29*time.Minute), time.Hour, 1)
		move(m, state.Sending, state.Event{Kind: state.Accept}, ago(29*time.Minute), false)
		if k == "m3" {
			move(m, state.Sent, state.Event{Kind: state.Evidence, Status: state.Delivered}, ago(28*time.Minute), false)
		}
	}

	// Downstream progress.
	h1 := sent("h1", "hooked", ago(30*time.Minute))
	move(h1, state.Sent, state.Event{Kind: state.Evidence, Status: state.Delivered}, ago(29*time.Minute), false)
	sent("h2", "hooked", ago(30*time.Minute))
	h3 := sent("h3", "hooked", ago(40*time.Minute))
	move(h3, state.Sent, state.Event{Kind: state.Evidence, Status: state.Read}, ago(39*time.Minute), false)
	sent("h4", "hooked", ago(5*time.Minute))
	sent("h5", "hooked", ago(2*time.Hour))
	sent("pl1", "plain", ago(30*time.Minute))

	// Sending: past the lease, long with a live lease, fresh.
	enqueue("s-expired", "sim", ago(10*time.Minute), "hello", "", time.Time{})
	claim("sim", ago(10*time.Minute), time.Minute, 1)
	enqueue("s-long", "sim", ago(5*time.Minute), "hello", "", time.Time{})
	claim("sim", ago(5*time.Minute), time.Hour, 1)
	enqueue("s-fresh", "sim", ago(10*time.Second), "hello", "", time.Time{})
	claim("sim", ago(10*time.Second), time.Hour, 1)

	// Queued last, so that no claim above took them: one maybe_sent row
	// waiting for its retry, and rows no drain here can send.
	m2 := enqueue("m2", "sim", ago(3*time.Minute), "hello m2", "", time.Time{})
	claim("sim", ago(3*time.Minute), time.Hour, 1)
	move(m2, state.Sending, state.Event{Kind: state.Retry}, ago(3*time.Minute), true)
	enqueue("a1", "api", ago(time.Minute), "hello", "", time.Time{})
	enqueue("a2", "api", ago(time.Minute), "hello", "", time.Time{})
	enqueue("g1", "ghost", ago(time.Minute), "hello", "", time.Time{})
	clk.Set(now)
}

// TestVitalSignsOfAQueueBuiltToKnownNumbers checks every vital sign of
// store.VitalStats (and the queue that cannot drain from here) in stats -o json,
// the table and -o prometheus (parsed, and linted by promlint), and each of
// health's thresholds on them at the figure (ok) and one below (crossed),
// on SQLite and on PostgreSQL.
func TestVitalSignsOfAQueueBuiltToKnownNumbers(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			u, st, clk := opsBackend(t, kind)
			now := time.Now()
			vitalQueue(t, st, clk, now)
			cfg := opsConfig(t, vitalsConfig)

			code, out, errs := runOps(t, u, cfg, "stats", "-o", "json")
			if code != 0 {
				t.Fatalf("stats -o json: exit %d: %s", code, errs)
			}
			var s struct {
				Conflicts       int64          `json:"key_conflicts"`
				RecentConflicts int64          `json:"recent_key_conflicts"`
				RecentReplays   int64          `json:"recent_key_replays"`
				Replays         int64          `json:"key_replays"`
				Long            int            `json:"sending_long"`
				PastLease       int            `json:"sending_past_lease"`
				Failures        map[string]int `json:"recent_failures_by_reason"`
				Resends         int            `json:"resends"`
				RecentResends   int            `json:"recent_resends"`
				MaybeSent       map[string]int `json:"maybe_sent_by_state"`
				Progress        []struct {
					Identity        string `json:"identity"`
					Sent            int    `json:"sent"`
					WithoutProgress int    `json:"without_progress"`
				} `json:"sent_progress"`
				NoProgressAfter time.Duration `json:"no_progress_after_ns"`
				Unsendable      []struct {
					Identity string `json:"identity"`
					Queued   int    `json:"queued"`
					Why      string `json:"why"`
				} `json:"queued_unsendable"`
			}
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				what      string
				got, want any
			}{
				{"key conflicts", s.Conflicts, int64(3)},
				{"recent key conflicts", s.RecentConflicts, int64(2)},
				{"recent key replays", s.RecentReplays, int64(1)},
				{"key replays", s.Replays, int64(1)},
				{"sending over a minute", s.Long, 2},
				{"sending past lease", s.PastLease, 1},
				{"failures by reason", fmt.Sprint(s.Failures), "map[canceled:1 exhausted:1 expired:1 invalid:0 opted_out:0 permanent:1 resolved:1]"},
				{"resends", s.Resends, 2},
				{"recent resends", s.RecentResends, 1},
				{"maybe sent", fmt.Sprint(s.MaybeSent), "map[delivered:1 queued:1 sent:1]"},
				{"sent progress", fmt.Sprintf("%+v", s.Progress), "[{Identity:hooked Sent:3 WithoutProgress:1}]"},
				{"no progress after", s.NoProgressAfter, 15 * time.Minute},
				{"queued unsendable", fmt.Sprintf("%+v", s.Unsendable),
					"[{Identity:api Queued:2 Why:MSGQ_VITALS_UNSET_TOKEN (token_env) not set} {Identity:ghost Queued:1 Why:not configured}]"},
			} {
				if c.got != c.want {
					t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
				}
			}

			// A shorter no-progress span takes in h4 (sent 5m ago).
			_, out, _ = runOps(t, u, cfg, "stats", "--no-progress-after", "1m", "-o", "json")
			if !strings.Contains(out, `"identity": "hooked",
      "sent": 4,
      "without_progress": 2`) {
				t.Errorf("stats --no-progress-after 1m: %s", out)
			}

			code, out, _ = runOps(t, u, cfg, "stats")
			for _, line := range []string{
				`(?m)^key conflicts +3 \(last 1h: 2\)$`,
				`(?m)^key replays \(last 1h\) +1$`,
				`(?m)^sending over 1m +2$`,
				`(?m)^failed \(last 1h\) +permanent 1, expired 1, exhausted 1, canceled 1, resolved 1, opted_out 0$`,
				`(?m)^resends +2 \(last 1h: 1\)$`,
				`(?m)^maybe sent +3 \(queued 1, sent 1, delivered 1\)$`,
				`(?m)^sent without progress after 15m \(last 1h\) +hooked 1 of 3$`,
				`(?m)^queued, cannot send from here +3 \(api 2: MSGQ_VITALS_UNSET_TOKEN \(token_env\) not set; ghost 1: not configured\)$`,
			} {
				if !opsMatch(line, out) {
					t.Errorf("stats: no line matching %s in\n%s", line, out)
				}
			}
			if code != 0 {
				t.Errorf("stats: exit %d", code)
			}

			code, out, errs = runOps(t, u, cfg, "stats", "-o", "prometheus")
			if code != 0 {
				t.Fatalf("stats -o prometheus: exit %d: %s", code, errs)
			}
			parser := expfmt.NewTextParser(model.LegacyValidation)
			mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
			if err != nil {
				t.Fatalf("stats -o prometheus does not parse: %v\n%s", err, out)
			}
			// promlint: the conventions promtool check metrics applies
			// (counters end in _total, units in base units, help text).
			var fams []*dto.MetricFamily
			for _, mf := range mfs {
				fams = append(fams, mf)
			}
			problems, err := promlint.NewWithMetricFamilies(fams).Lint()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("promlint: %s: %s", p.Metric, p.Text)
			}
			value := func(name string, labels ...string) float64 {
				t.Helper()
			metrics:
				for _, m := range mfs[name].GetMetric() {
					got := map[string]string{}
					for _, l := range m.GetLabel() {
						got[l.GetName()] = l.GetValue()
					}
					for i := 0; i < len(labels); i += 2 {
						if got[labels[i]] != labels[i+1] {
							continue metrics
						}
					}
					if m.Counter != nil {
						return m.Counter.GetValue()
					}
					return m.Gauge.GetValue()
				}
				t.Errorf("no %s%v", name, labels)
				return -1
			}
			for _, c := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"msgq_key_conflicts_total", nil, 3},
				{"msgq_recent_key_conflicts", nil, 2},
				{"msgq_recent_key_replays", nil, 1},
				{"msgq_sending_long", nil, 2},
				{"msgq_recent_failures", []string{"reason", "permanent"}, 1},
				{"msgq_recent_failures", []string{"reason", "expired"}, 1},
				{"msgq_recent_failures", []string{"reason", "exhausted"}, 1},
				{"msgq_recent_failures", []string{"reason", "canceled"}, 1},
				{"msgq_recent_failures", []string{"reason", "resolved"}, 1},
				{"msgq_resends_total", nil, 2},
				{"msgq_recent_resends", nil, 1},
				{"msgq_maybe_sent_messages", []string{"state", "queued"}, 1},
				{"msgq_maybe_sent_messages", []string{"state", "unknown"}, 0},
				{"msgq_recent_sent", []string{"identity", "hooked"}, 3},
				{"msgq_recent_sent_without_progress", []string{"identity", "hooked"}, 1},
				{"msgq_no_progress_after_seconds", nil, 900},
				{"msgq_queued_unsendable", []string{"identity", "api"}, 2},
				{"msgq_queued_unsendable", []string{"identity", "ghost"}, 1},
			} {
				if got := value(c.name, c.labels...); got != c.want {
					t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
				}
			}
			for _, name := range []string{"msgq_key_conflicts_total", "msgq_resends_total"} {
				if mf := mfs[name]; mf.GetType() != dto.MetricType_COUNTER {
					t.Errorf("%s is a %s", name, mf.GetType())
				}
			}
			if _, ok := mfs["msgq_recent_sent"]; ok && len(mfs["msgq_recent_sent"].GetMetric()) != 1 {
				t.Errorf("msgq_recent_sent has series for identities whose webhooks msgq does not receive: %v", mfs["msgq_recent_sent"])
			}

			// health: every vital threshold at its figure passes ...
			figures := []struct {
				flag  string
				value int64
			}{
				{"max-key-conflicts", 2}, {"max-sending-long", 2}, {"max-failed-permanent", 1}, {"max-failed-expired", 1},
				{"max-failed-exhausted", 1}, {"max-failed-canceled", 1}, {"max-failed-resolved", 1}, {"max-resends", 1},
				{"max-maybe-sent", 2}, {"max-sent-without-progress", 1}, {"max-unsendable", 3},
			}
			var at, below []string
			for _, f := range figures {
				at = append(at, "--"+f.flag, fmt.Sprint(f.value))
				below = append(below, "--"+f.flag, fmt.Sprint(f.value-1))
			}
			code, out, errs = runOps(t, u, cfg, append([]string{"health"}, at...)...)
			if code != 0 || errs != "" {
				t.Errorf("health at the figures: exit %d, stderr %q\n%s", code, errs, out)
			}
			for _, f := range figures {
				if line := fmt.Sprintf(`(?m)^--%s +%d +%d +ok$`, f.flag, f.value, f.value); !opsMatch(line, out) {
					t.Errorf("health: no line matching %s in\n%s", line, out)
				}
			}
			// ... and one below each crosses it: exit 4, one line each.
			code, out, errs = runOps(t, u, cfg, append([]string{"health", "-o", "json"}, below...)...)
			if code != cli.ExitFound {
				t.Errorf("health below every figure: exit %d, want %d", code, cli.ExitFound)
			}
			wantErr := `^health: 2 key conflict\(s\) in the last 1h: a key was reused with another body \(max 1\)
health: 2 rows in sending for over 1m, each a possible duplicate \(max 1\)
health: 1 row failed as permanent in the last 1h \(max 0\)
health: 1 row failed as expired in the last 1h \(max 0\)
health: 1 row failed as exhausted in the last 1h \(max 0\)
health: 1 row failed as canceled in the last 1h \(max 0\)
health: 1 row failed as resolved in the last 1h \(max 0\)
health: 1 resend\(s\) in the last 1h \(max 0\)
health: 2 rows flagged maybe_sent with no delivered or read status \(max 1\)
health: sent rows without a delivered or read status after 15m \(last 1h\): hooked 1 of 3 \(max 0 per identity\)
health: 3 rows queued for identities that cannot send from here: api 2 \(MSGQ_VITALS_UNSET_TOKEN \(token_env\) not set\), ghost 1 \(not configured\) \(max 2\)
msgq: 11 of 11 health thresholds crossed
$`
			if !opsMatch(wantErr, errs) {
				t.Errorf("health stderr:\n%s\nwant:\n%s", errs, wantErr)
			}
			var h struct {
				OK     bool `json:"ok"`
				Checks []struct {
					Name    string `json:"name"`
					Value   int64  `json:"value"`
					Max     int64  `json:"max"`
					Crossed bool   `json:"crossed"`
				} `json:"checks"`
			}
			if err := json.Unmarshal([]byte(out), &h); err != nil || h.OK || len(h.Checks) != len(figures) {
				t.Fatalf("health -o json (%v): %s", err, out)
			}
			for i, f := range figures {
				c := h.Checks[i]
				if c.Name != strings.ReplaceAll(f.flag, "-", "_") || c.Value != f.value || c.Max != f.value-1 || !c.Crossed {
					t.Errorf("check %d: %+v, want %s %d crossed", i, c, f.flag, f.value)
				}
			}

			// The window and the no-progress span come from the config
			// file's health section too; a window that ends before the
			// failures sees none of them.
			cfg2 := opsConfig(t, vitalsConfig+"health:\n  window: 5m\n  max_failed_permanent: 0\n  max_key_conflicts: 2\n")
			code, out, errs = runOps(t, u, cfg2, "health")
			if code != 0 || !opsMatch(`(?m)^--max-failed-permanent +0 +0 +ok$`, out) {
				t.Errorf("health with window 5m: exit %d: %s %s", code, out, errs)
			}
		})
	}
}

// TestHealthRefusesABadWindow: the spans are parsed before the store is
// touched.
func TestHealthRefusesABadWindow(t *testing.T) {
	t.Parallel()
	cfg := opsConfig(t, "log_level: warn\n")
	for _, args := range [][]string{
		{"health", "--max-resends", "0", "--window", "soon"},
		{"health", "--max-resends", "0", "--no-progress-after", "-5m"},
		{"stats", "--no-progress-after", "0s"},
	} {
		code, out, errs := runOps(t, "sqlite:"+t.TempDir()+"/never/q.db", cfg, args...)
		if code != cli.ExitUsage || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "want a positive duration") {
			t.Errorf("msgq %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errs)
		}
	}
}
