package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/msgq/msgq/internal/cli"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// challengeVitalQueue builds, through the store, challenges whose figures
// are known (the window is the default hour):
//
//	fd-a: created 20m ago, step 1 delivered 60s later
//	fd-b: created 20m ago, step 1 failed, step 2 released at 2m and
//	      delivered at 3m
//	fd-c: created 20m ago, step 1 unknown; expired 10m ago (unknown past
//	      its deadline)
//	fd-d: created 3m ago, step 1 unknown: the fallback is blocked
//
// so: 2 first deliveries (p50 1m, p95 3m), 1 expired, 1 unknown past the
// deadline, 1 open and blocked; completed by step 1 and by step 2 once
// each, 1 fallback fired.
func challengeVitalQueue(t *testing.T, st store.Store, clk *clock, now time.Time) {
	t.Helper()
	ctx := context.Background()
	at := func(d time.Duration) time.Time { t.Helper(); clk.Set(now.Add(-d)); return now.Add(-d) }
	enqueue := func(key string) {
		t.Helper()
		first := store.EnqueueParams{To: "+15551230000", Channel: store.ChannelWhatsApp, Identity: "sim", Lane: store.LaneReply,
			Payload: store.Payload{Text: "Your code is 123456"}}
		sms := first
		sms.Channel = store.ChannelSMS
		p := store.ChallengeParams{Key: key, ExpiresIn: 10 * time.Minute,
			Steps: []store.ChallengeStepParams{{EnqueueParams: first}, {EnqueueParams: sms, After: 2 * time.Minute}}}
		if _, err := st.ChallengeEnqueue(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	tick := func(now time.Time) {
		t.Helper()
		if _, err := st.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	// call claims the one due row (key) and moves it by ev.
	call := func(key string, now time.Time, ev state.Event) string {
		t.Helper()
		cs, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 5, Now: now})
		if err != nil || len(cs) != 1 || cs[0].Key != key {
			t.Fatalf("claimed %+v (%v), want %s alone", cs, err, key)
		}
		if _, err := st.MessageTransition(ctx, &store.TransitionParams{ID: cs[0].ID, From: state.Sending, Event: ev, Source: store.SourceDrain,
			LeaseOwner: "drain-1", Now: now, NextAttemptAt: now,
			Attempt: &store.Attempt{Number: 1, StartedAt: now, FinishedAt: now, Class: "accepted"}}); err != nil {
			t.Fatal(err)
		}
		return cs[0].ID
	}
	delivered := func(id string, now time.Time) {
		t.Helper()
		if _, err := st.MessageTransition(ctx, &store.TransitionParams{ID: id, From: state.Sent,
			Event: state.Event{Kind: state.Evidence, Status: state.Delivered}, Source: store.SourceWebhook, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	t20 := at(20 * time.Minute)
	enqueue("fd-a")
	a := call("fd-a", t20, state.Event{Kind: state.Accept})
	delivered(a, at(19*time.Minute))
	at(20 * time.Minute)
	enqueue("fd-b")
	call("fd-b", t20, state.Event{Kind: state.Fail, Reason: state.Permanent})
	enqueue("fd-c")
	call("fd-c", t20, state.Event{Kind: state.Ambiguous})
	tick(at(18 * time.Minute)) // releases fd-b's step 2; fd-c's is blocked
	b := call("fd-b/2", now.Add(-18*time.Minute), state.Event{Kind: state.Accept})
	delivered(b, at(17*time.Minute))
	tick(at(5 * time.Minute)) // fd-c expires
	t3 := at(3 * time.Minute)
	enqueue("fd-d")
	call("fd-d", t3, state.Event{Kind: state.Ambiguous})
	tick(at(time.Minute)) // fd-d's step 2 is blocked
	clk.Set(now)
}

// TestChallengeVitalsInStatsPrometheusAndHealth: the challenges' figures
// of the window (creation to first delivery, expired) and the gauges
// health checks (blocked, unknown past the deadline) in stats -o json, the
// table and -o prometheus (parsed), and each of health's challenge
// thresholds at the figure (ok, exit 0) and below it (crossed: exit 4,
// one line naming the figure, the value and the threshold), on SQLite and
// on PostgreSQL.
func TestChallengeVitalsInStatsPrometheusAndHealth(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		u, st, clk := opsBackend(t, kind)
		challengeVitalQueue(t, st, clk, time.Now())
		cfg := opsConfig(t, "log_level: warn\n")

		code, out, errs := runOps(t, u, cfg, "stats", "-o", "json")
		if code != 0 {
			t.Fatalf("stats -o json: exit %d: %s", code, errs)
		}
		var s struct {
			Challenges map[string]any `json:"challenges"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]float64{"blocked": 1, "expired": 1, "recent_expired": 1, "unknown_past_deadline": 1,
			"recent_first_deliveries": 2, "first_delivery_p50_ns": float64(time.Minute), "first_delivery_p95_ns": float64(3 * time.Minute)} {
			if got, ok := s.Challenges[k].(float64); !ok || got != want {
				t.Errorf("challenges.%s = %v, want %v", k, s.Challenges[k], want)
			}
		}

		_, out, _ = runOps(t, u, cfg, "stats")
		if line := `(?m)^challenges \(last 1h\) +2 first delivered \(creation to first delivery: p50 1m, p95 3m\), 1 expired$`; !opsMatch(line, out) {
			t.Errorf("stats: no line matching %s in\n%s", line, out)
		}

		_, out, _ = runOps(t, u, cfg, "stats", "-o", "prometheus")
		parser := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
		if err != nil {
			t.Fatalf("stats -o prometheus does not parse: %v\n%s", err, out)
		}
		for name, want := range map[string]float64{"msgq_recent_challenges_expired": 1, "msgq_recent_challenge_first_deliveries": 2,
			"msgq_recent_challenge_first_delivery_p50_seconds": 60, "msgq_recent_challenge_first_delivery_p95_seconds": 180,
			"msgq_challenge_fallbacks_blocked": 1, "msgq_challenge_unknown_past_deadline": 1} {
			mf := mfs[name]
			if mf.GetType() != dto.MetricType_GAUGE || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != want {
				t.Errorf("%s: %v, want the gauge %v", name, mf, want)
			}
		}

		// The totals since the store was created, as counters.
		for _, c := range []struct {
			name, step string
			want       float64
		}{{"msgq_challenges_completed_total", "1", 1}, {"msgq_challenges_completed_total", "2", 1},
			{"msgq_challenge_fallbacks_fired_total", "", 1}, {"msgq_challenges_expired_total", "", 1},
			{"msgq_challenge_superseding_sends_total", "", 0}} {
			mf, found := mfs[c.name], false
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) == 0 && c.step == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == c.step {
					found = true
					if mf.GetType() != dto.MetricType_COUNTER || m.GetCounter().GetValue() != c.want {
						t.Errorf("%s{step=%q}: %v, want the counter %v", c.name, c.step, m, c.want)
					}
				}
			}
			if !found {
				t.Errorf("no %s{step=%q} in %v", c.name, c.step, mf)
			}
		}
		if g := mfs["msgq_challenges_open"].GetMetric(); len(g) != 1 || g[0].GetGauge().GetValue() != 1 {
			t.Errorf("msgq_challenges_open: %v, want 1 (fd-d)", g)
		}

		at := []string{"health", "--max-challenges-blocked", "1", "--max-challenges-expired", "1",
			"--max-challenge-unknown-past-deadline", "1", "--max-challenge-first-delivery-p95", "3m"}
		code, out, errs = runOps(t, u, cfg, at...)
		if code != 0 || errs != "" {
			t.Errorf("health at the figures: exit %d, stderr %q\n%s", code, errs, out)
		}
		for _, line := range []string{`(?m)^--max-challenges-blocked +1 +1 +ok$`, `(?m)^--max-challenges-expired +1 +1 +ok$`,
			`(?m)^--max-challenge-unknown-past-deadline +1 +1 +ok$`, `(?m)^--max-challenge-first-delivery-p95 +3m +3m +ok$`} {
			if !opsMatch(line, out) {
				t.Errorf("health: no line matching %s in\n%s", line, out)
			}
		}
		code, out, errs = runOps(t, u, cfg, "health", "-o", "json", "--max-challenges-blocked", "0", "--max-challenges-expired", "0",
			"--max-challenge-unknown-past-deadline", "0", "--max-challenge-first-delivery-p95", "2m59s")
		if code != cli.ExitFound {
			t.Errorf("health below the figures: exit %d, want %d", code, cli.ExitFound)
		}
		wantErr := `^health: 1 open challenge\(s\) with the fallback blocked by a step in sending or unknown \(max 0\)
health: 1 challenge\(s\) expired in the last 1h with no step completed \(max 0\)
health: 1 challenge step\(s\) in unknown past their deadline, each a prompt that may or may not have arrived \(max 0\)
health: challenge creation to first delivery p95 is 3m over 2 challenge\(s\) in the last 1h \(max 2m59s\)
msgq: 4 of 4 health thresholds crossed
$`
		if !opsMatch(wantErr, errs) {
			t.Errorf("health stderr:\n%s\nwant:\n%s", errs, wantErr)
		}
		var h struct {
			Checks []struct {
				Name    string `json:"name"`
				Value   int64  `json:"value"`
				Crossed bool   `json:"crossed"`
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &h); err != nil || len(h.Checks) != 4 {
			t.Fatalf("health -o json (%v): %s", err, out)
		}
		if c := h.Checks[3]; c.Name != "max_challenge_first_delivery_p95" || c.Value != int64(3*time.Minute) || !c.Crossed {
			t.Errorf("the p95 check: %+v", c)
		}
		// The threshold from the config file, and a bad one refused.
		cfg2 := opsConfig(t, "log_level: warn\nhealth:\n  max_challenges_expired: 0\n")
		if code, _, errs := runOps(t, u, cfg2, "health"); code != cli.ExitFound || !strings.Contains(errs, "1 challenge(s) expired") {
			t.Errorf("health from the config file: exit %d: %s", code, errs)
		}
		code, out, errs = runOps(t, u, cfg, "health", "--max-challenge-first-delivery-p95", "soon")
		if code != cli.ExitUsage || out != "" || !strings.HasPrefix(errs, `msgq: --max-challenge-first-delivery-p95 (health.max_challenge_first_delivery_p95) "soon": `) {
			t.Errorf("a bad age: exit %d, stdout %q, stderr %q", code, out, errs)
		}
	})
}
