package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/msgq/msgq/internal/cli"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/postgres"
	"github.com/msgq/msgq/internal/store/sqlite"
)

// clock is a store clock the test sets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// opsBackend makes a fresh store of kind and returns the URL msgq is
// given and a handle on the same store whose clock the test sets.
func opsBackend(t *testing.T, kind string) (string, store.Store, *clock) {
	t.Helper()
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	var (
		u   string
		st  store.Store
		err error
	)
	switch kind {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "q.db")
		u = "sqlite:" + path
		st, err = sqlite.Open(ctx, path, sqlite.Options{Now: clk.Now})
	case "postgres":
		base := postgresURL(t)
		var schema string
		u, schema = pgStore(t, "msgq_stats")
		st, err = postgres.Open(ctx, base, postgres.Options{Now: clk.Now, Schema: schema})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return u, st, clk
}

// knownQueue builds, through the store, a queue whose vital signs are
// known, at times relative to now (what drains and the provider's
// webhooks would have written):
//
//	sim:    queued 2 (q-old, due 20m ago; q-future, due in an hour),
//	        sending 2 (l-expired, lease expired 9m ago; l-live),
//	        unknown 2, delivered 3 (2s, 4s and 10s after sent), failed 1
//	paused: queued 1 (due 2h ago, but its identity is paused)
//
// plus two replays of d1's key. The calls all finished 10 minutes ago:
// accepted 3, ambiguous 2, permanent 1.
func knownQueue(t *testing.T, st store.Store, clk *clock, now time.Time) {
	t.Helper()
	ctx := context.Background()
	t10 := now.Add(-10 * time.Minute)
	enqueue := func(key, identity string, at, notBefore time.Time) {
		t.Helper()
		clk.Set(at)
		p := store.EnqueueParams{Tenant: store.DefaultTenant, Key: key, To: "+15551230000", Channel: store.ChannelWhatsApp,
			Identity: identity, Lane: store.LaneBulk, Payload: store.Payload{Text: "hello " + key}, NotBefore: notBefore}
		if _, err := st.MessageEnqueue(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(at time.Time, lease time.Duration, n int) []store.Claimed {
		t.Helper()
		clk.Set(at)
		cs, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: lease, Limit: n, Now: at})
		if err != nil || len(cs) != n {
			t.Fatalf("claimed %d rows (%v), want %d", len(cs), err, n)
		}
		return cs
	}
	move := func(id string, from state.State, ev state.Event, at time.Time, class string) {
		t.Helper()
		clk.Set(at)
		p := &store.TransitionParams{ID: id, From: from, Event: ev, Source: store.SourceDrain, Now: at}
		if from == state.Sending {
			p.LeaseOwner = "drain-1"
			p.Attempt = &store.Attempt{Number: 1, StartedAt: at, FinishedAt: at, Class: class}
		}
		if _, err := st.MessageTransition(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	t15 := now.Add(-15 * time.Minute)
	for _, k := range []string{"l-expired", "d1", "d2", "d3", "u1", "u2", "f1", "l-live"} {
		enqueue(k, "sim", t15, time.Time{})
	}
	claim(t10, time.Minute, 1) // l-expired: the lease ran out 9m ago
	gap := map[string]time.Duration{"d1": 2 * time.Second, "d2": 4 * time.Second, "d3": 10 * time.Second}
	for _, c := range claim(t10, time.Hour, 6) {
		switch c.Key[0] {
		case 'd':
			move(c.ID, state.Sending, state.Event{Kind: state.Accept}, t10, "accepted")
			move(c.ID, state.Sent, state.Event{Kind: state.Evidence, Status: state.Delivered}, t10.Add(gap[c.Key]), "")
		case 'u':
			move(c.ID, state.Sending, state.Event{Kind: state.Ambiguous}, t10, "ambiguous")
		case 'f':
			move(c.ID, state.Sending, state.Event{Kind: state.Fail, Reason: state.Permanent}, t10, "permanent")
		default:
			t.Fatalf("claimed %s", c.Key)
		}
	}
	claim(now, time.Hour, 1) // l-live
	enqueue("q-old", "sim", now.Add(-20*time.Minute), time.Time{})
	enqueue("q-future", "sim", now, now.Add(time.Hour))
	enqueue("q-paused", "paused", now.Add(-2*time.Hour), time.Time{})
	if err := st.IdentityPause(ctx, "paused", "test"); err != nil {
		t.Fatal(err)
	}
	enqueue("d1", "sim", now, time.Time{}) // two replays
	enqueue("d1", "sim", now, time.Time{})
}

// runOps runs one msgq invocation in this process against storeURL, with a
// config file of its own (so the user's is never read), and returns its
// exit code, stdout and stderr.
func runOps(t *testing.T, storeURL, config string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append([]string{"--store", storeURL, "--config", config}, args...)
	code := cli.Run(context.Background(), args, &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func opsConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatsAndHealthReportAQueueBuiltToKnownNumbers checks every figure of
// stats (table, json and prometheus) and every threshold of health against
// knownQueue, on SQLite and on PostgreSQL.
func TestStatsAndHealthReportAQueueBuiltToKnownNumbers(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			u, st, clk := opsBackend(t, kind)
			now := time.Now()
			knownQueue(t, st, clk, now)
			cfg := opsConfig(t, "log_level: warn\n")

			// -o json: every field, by its pinned name.
			code, out, errs := runOps(t, u, cfg, "stats", "-o", "json")
			if code != 0 {
				t.Fatalf("stats -o json: exit %d: %s", code, errs)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal([]byte(out), &raw); err != nil {
				t.Fatal(err)
			}
			fields := slices.Sorted(maps.Keys(raw))
			want := []string{"at", "attempts_by_class", "challenges", "clock_offset_ns", "clock_offset_process", "counts", "delivered", "delivery_p50_ns", "delivery_p95_ns",
				"duplicate_webhooks", "events", "key_replays", "notices", "oldest_eligible_age_ns", "oldest_eligible_due_at", "oldest_intake_at", "parked_evidence",
				"provider_id_collisions", "replayed_webhooks", "sending_past_lease", "suspect_evidence", "template_held_rows", "template_holds",
				"unattributed_inbound", "unknown", "unknown_notices", "unprocessed_webhooks", "unreadable_webhooks", "window_ns"}
			want = slices.Sorted(slices.Values(append(want, statsVitalFields...))) // stats_vitals_test.go
			if !slices.Equal(fields, want) {
				t.Errorf("stats -o json fields %v, want %v", fields, want)
			}
			var s struct {
				At     time.Time          `json:"at"`
				Counts []store.StateCount `json:"counts"`
				Due    *time.Time         `json:"oldest_eligible_due_at"`
				Age    *time.Duration     `json:"oldest_eligible_age_ns"`
				Past   int                `json:"sending_past_lease"`
				Unk    int                `json:"unknown"`
				Rep    int                `json:"key_replays"`
				ByCls  map[string]int     `json:"attempts_by_class"`
				Del    int                `json:"delivered"`
				P50    time.Duration      `json:"delivery_p50_ns"`
				P95    time.Duration      `json:"delivery_p95_ns"`
				Window time.Duration      `json:"window_ns"`
			}
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, c := range s.Counts {
				counts[c.Identity+"/"+string(c.State)] = c.N
			}
			if got, want := fmt.Sprint(counts), "map[paused/queued:1 sim/delivered:3 sim/failed:1 sim/queued:2 sim/sending:2 sim/unknown:2]"; got != want {
				t.Errorf("counts %s, want %s", got, want)
			}
			if s.Due == nil || !s.Due.Equal(now.Add(-20*time.Minute).Truncate(store.Resolution)) {
				t.Errorf("oldest eligible due at %v, want %v (q-old; q-paused is older but its identity is paused)", s.Due, now.Add(-20*time.Minute))
			}
			if s.Age == nil || *s.Age != s.At.Sub(*s.Due) || *s.Age < 20*time.Minute || *s.Age > 21*time.Minute {
				t.Errorf("oldest eligible age %v, want at - due (about 20m)", s.Age)
			}
			if s.Past != 1 || s.Unk != 2 || s.Rep != 2 {
				t.Errorf("sending past lease %d, unknown %d, key replays %d; want 1, 2, 2", s.Past, s.Unk, s.Rep)
			}
			if got := fmt.Sprint(s.ByCls); got != "map[accepted:3 ambiguous:2 identity:0 permanent:1 rate_limited:0 transient:0]" {
				t.Errorf("attempts by class %s", got)
			}
			if s.Del != 3 || s.P50 != 4*time.Second || s.P95 != 10*time.Second || s.Window != time.Hour {
				t.Errorf("delivered %d, p50 %v, p95 %v, window %v; want 3, 4s, 10s, 1h", s.Del, s.P50, s.P95, s.Window)
			}

			// A window that ends before the calls: nothing recent.
			_, out, _ = runOps(t, u, cfg, "stats", "--window", "5m", "-o", "json")
			if !strings.Contains(out, `"accepted": 0`) || !strings.Contains(out, `"delivered": 0`) || !strings.Contains(out, `"window_ns": 300000000000`) {
				t.Errorf("stats --window 5m: %s", out)
			}

			// The table.
			code, out, _ = runOps(t, u, cfg, "stats")
			for _, line := range []string{
				`(?m)^IDENTITY +QUEUED +SENDING +UNKNOWN +SENT +FAILED +DELIVERED +READ$`,
				`(?m)^paused +1 +0 +0 +0 +0 +0 +0$`,
				`(?m)^sim +2 +2 +2 +0 +1 +3 +0$`,
				`(?m)^\(all\) +3 +2 +2 +0 +1 +3 +0$`,
				`(?m)^oldest eligible queued +20m(\d+s)? \(due since \S+\)$`,
				`(?m)^sending past lease +1$`,
				`(?m)^unknown +2$`,
				`(?m)^key replays +2$`,
				`(?m)^attempts \(last 1h\) +accepted 3, ambiguous 2, identity 0, permanent 1, rate_limited 0, transient 0$`,
				`(?m)^delivered \(last 1h\) +3 \(sent to delivered: p50 4s, p95 10s\)$`,
				`(?m)^unreadable webhooks +0$`,
			} {
				if !opsMatch(line, out) {
					t.Errorf("stats: no line matching %s in\n%s", line, out)
				}
			}
			if code != 0 {
				t.Errorf("stats: exit %d", code)
			}

			// -o prometheus: parsed by Prometheus' own parser.
			code, out, errs = runOps(t, u, cfg, "stats", "-o", "prometheus")
			if code != 0 {
				t.Fatalf("stats -o prometheus: exit %d: %s", code, errs)
			}
			// The legacy scheme: the names node_exporter and every
			// Prometheus version accept.
			parser := expfmt.NewTextParser(model.LegacyValidation)
			mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
			if err != nil {
				t.Fatalf("stats -o prometheus does not parse: %v\n%s", err, out)
			}
			value := func(name string, labels ...string) float64 {
				t.Helper()
				mf := mfs[name]
				if mf == nil {
					t.Errorf("no metric %s", name)
					return -1
				}
			metrics:
				for _, m := range mf.GetMetric() {
					got := map[string]string{}
					for _, l := range m.GetLabel() {
						got[l.GetName()] = l.GetValue()
					}
					for i := 0; i < len(labels); i += 2 {
						if got[labels[i]] != labels[i+1] {
							continue metrics
						}
					}
					switch {
					case m.Gauge != nil:
						return m.Gauge.GetValue()
					case m.Counter != nil:
						return m.Counter.GetValue()
					}
				}
				t.Errorf("no %s%v", name, labels)
				return -1
			}
			for _, c := range []struct {
				name   string
				labels []string
				want   float64
			}{
				{"msgq_messages", []string{"identity", "sim", "state", "delivered"}, 3},
				{"msgq_messages", []string{"identity", "sim", "state", "read"}, 0},
				{"msgq_messages", []string{"identity", "paused", "state", "queued"}, 1},
				{"msgq_messages", []string{"identity", "paused", "state", "unknown"}, 0},
				{"msgq_sending_past_lease", nil, 1},
				{"msgq_key_replays_total", nil, 2},
				{"msgq_recent_attempts", []string{"class", "ambiguous"}, 2},
				{"msgq_recent_attempts", []string{"class", "transient"}, 0},
				{"msgq_recent_deliveries", nil, 3},
				{"msgq_delivery_latency_p50_seconds", nil, 4},
				{"msgq_delivery_latency_p95_seconds", nil, 10},
				{"msgq_stats_window_seconds", nil, 3600},
				{"msgq_unreadable_webhooks", nil, 0},
				{"msgq_replayed_webhooks_total", nil, 0},
				{"msgq_duplicate_webhooks_total", nil, 0},
				{"msgq_clock_offset_seconds", nil, 0},
				{"msgq_suspect_webhook_statuses", nil, 0},
				{"msgq_provider_id_collisions", nil, 0},
				{"msgq_notices", nil, 0},
				{"msgq_unknown_notices", nil, 0},
				{"msgq_template_holds", nil, 0},
				{"msgq_template_held_rows", nil, 0},
				{"msgq_events_pending", nil, 0},
				{"msgq_events_dead", nil, 0},
				{"msgq_events_oldest_pending_age_seconds", nil, 0},
			} {
				if got := value(c.name, c.labels...); got != c.want {
					t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
				}
			}
			if age := value("msgq_oldest_eligible_queued_age_seconds"); age < 1200 || age > 1260 {
				t.Errorf("msgq_oldest_eligible_queued_age_seconds = %v, want about 1200", age)
			}
			if at := value("msgq_stats_timestamp_seconds"); at < float64(now.Unix()) || at > float64(now.Unix()+60) {
				t.Errorf("msgq_stats_timestamp_seconds = %v, want about %d", at, now.Unix())
			}
			if mf := mfs["msgq_key_replays_total"]; mf.GetType().String() != "COUNTER" {
				t.Errorf("msgq_key_replays_total is a %s", mf.GetType())
			}
			for name := range mfs {
				if !model.LegacyValidation.IsValidMetricName(name) || !strings.HasPrefix(name, "msgq_") {
					t.Errorf("metric name %q", name)
				}
			}

			// health: every threshold at the figure passes (a maximum is
			// still healthy) ...
			code, out, errs = runOps(t, u, cfg, "health", "--max-oldest-queued", "30m", "--max-stuck", "3",
				"--max-unknown", "2", "--max-sending-past-lease", "1")
			if code != 0 || errs != "" {
				t.Errorf("health at the figures: exit %d, stderr %q", code, errs)
			}
			for _, line := range []string{`(?m)^CHECK +VALUE +MAX +STATUS$`, `(?m)^--max-oldest-queued +20m(\d+s)? +30m +ok$`,
				`(?m)^--max-stuck +3 +3 +ok$`, `(?m)^--max-unknown +2 +2 +ok$`, `(?m)^--max-sending-past-lease +1 +1 +ok$`} {
				if !opsMatch(line, out) {
					t.Errorf("health: no line matching %s in\n%s", line, out)
				}
			}
			// ... and one below each crosses it: exit 4, a line each.
			code, out, errs = runOps(t, u, cfg, "health", "--max-oldest-queued", "5m", "--max-stuck", "2",
				"--max-unknown", "1", "--max-sending-past-lease", "0", "-o", "json")
			if code != cli.ExitFound {
				t.Errorf("health past every threshold: exit %d, want %d", code, cli.ExitFound)
			}
			wantErr := `^health: oldest eligible queued row is 20m(\d+s)? old \(max 5m\)
health: 3 rows stuck: 1 in sending past the lease, 2 unknown \(max 2\)
health: 2 rows in unknown \(max 1\)
health: 1 row in sending past the lease \(max 0\)
msgq: 4 of 4 health thresholds crossed
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
					Message string `json:"message"`
				} `json:"checks"`
			}
			if err := json.Unmarshal([]byte(out), &h); err != nil {
				t.Fatalf("health -o json: %v\n%s", err, out)
			}
			if h.OK || len(h.Checks) != 4 {
				t.Fatalf("health -o json: %s", out)
			}
			for i, want := range []struct {
				name  string
				value int64
				max   int64
			}{{"max_oldest_queued", h.Checks[0].Value, int64(5 * time.Minute)}, {"max_stuck", 3, 2}, {"max_unknown", 2, 1}, {"max_sending_past_lease", 1, 0}} {
				c := h.Checks[i]
				if c.Name != want.name || c.Value != want.value || c.Max != want.max || !c.Crossed || c.Message == "" {
					t.Errorf("check %d: %+v, want %+v crossed", i, c, want)
				}
			}
			if age := time.Duration(h.Checks[0].Value); age < 20*time.Minute || age > 21*time.Minute {
				t.Errorf("max_oldest_queued value %v, want about 20m", age)
			}
		})
	}
}

// TestJSONFieldsOfHealthAndPurge pins the field names scripts read.
func TestJSONFieldsOfHealthAndPurge(t *testing.T) {
	t.Parallel()
	u, _, _ := opsBackend(t, "sqlite")
	cfg := opsConfig(t, "log_level: warn\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"health", "--max-stuck", "0", "-o", "json"}, `{"at","checks":[{"crossed","max","message","name","value"}],"ok"}`},
		{[]string{"purge", "--older-than", "90d", "-o", "json"}, `{"before","dry_run","inbound_texts","messages","purpose","status_events","tenant","webhook_events"}`},
	} {
		code, out, errs := runOps(t, u, cfg, c.args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		var v any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		if got := jsonShape(v); got != c.want {
			t.Errorf("%v: fields %s, want %s", c.args, got, c.want)
		}
	}
}

// jsonShape is a JSON value's field names, recursively, sorted; arrays show
// their first element.
func jsonShape(v any) string {
	switch v := v.(type) {
	case map[string]any:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if s := jsonShape(v[k]); s != "" {
				parts = append(parts, fmt.Sprintf("%q:%s", k, s))
			} else {
				parts = append(parts, fmt.Sprintf("%q", k))
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		if len(v) == 0 {
			return "[]"
		}
		return "[" + jsonShape(v[0]) + "]"
	}
	return ""
}

// opsMatch says whether the regular expression re matches s.
func opsMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestStatsHealthAndPurgeRefuseBadInputBeforeTouchingTheStore: each bad
// input exits 2 with one line naming what is wrong, and no store is
// created.
func TestStatsHealthAndPurgeRefuseBadInputBeforeTouchingTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "never.db")
	cfg := opsConfig(t, "log_level: warn\n")
	badValue := opsConfig(t, "health:\n  max_sending_past_lease: lots\n")
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"stats", "--window", "0s"}, `--window must be positive \(got 0s\)`},
		{[]string{"stats", "--window", "-1m"}, `--window must be positive \(got -1m0s\)`},
		{[]string{"stats", "--window", "soon"}, `invalid argument "soon" for "--window" flag: .*`},
		{[]string{"stats", "now"}, `want no arguments, got 1 argument\(s\)`},
		{[]string{"stats", "-o", "yaml"}, `unknown output format "yaml" \(want table, json or prometheus\)`},
		{[]string{"list", "-o", "prometheus"}, `output format "prometheus" is only for msgq stats \(want table or json\)`},
		{[]string{"show", "k", "-o", "prometheus"}, `output format "prometheus" is only for msgq stats \(want table or json\)`},
		{[]string{"health", "--max-stuck", "0", "-o", "prometheus"}, `output format "prometheus" is only for msgq stats \(want table or json\)`},
		{[]string{"purge", "--older-than", "1d", "-o", "prometheus"}, `output format "prometheus" is only for msgq stats \(want table or json\)`},
		{[]string{"health"}, `no thresholds: give at least one of .*`},
		{[]string{"health", "--max-stuck", "many"}, `--max-stuck \(health.max_stuck\) "many": want a count of 0 or more`},
		{[]string{"health", "--max-unknown", "1.5"}, `--max-unknown \(health.max_unknown\) "1.5": want a count of 0 or more`},
		{[]string{"health", "--max-sending-past-lease", "-2"}, `--max-sending-past-lease \(health.max_sending_past_lease\) "-2": want a count of 0 or more`},
		{[]string{"health", "--max-oldest-queued", "5"}, `--max-oldest-queued \(health.max_oldest_queued\) "5": want a duration like 90d, 36h or 30m`},
		{[]string{"health", "--max-oldest-queued", "-5m"}, `--max-oldest-queued \(health.max_oldest_queued\) "-5m": must not be negative`},
		{[]string{"health", "--max-clock-offset", "-1s"}, `--max-clock-offset \(health.max_clock_offset\) "-1s": must not be negative`},
		{[]string{"health", "--max-clock-offset", "2"}, `--max-clock-offset \(health.max_clock_offset\) "2": want a duration like 90d, 36h or 30m`},
		{[]string{"drain", "--clock-warn", "0s"}, `--clock-warn \(clock_warn\) "0s": want a positive duration like 2s`},
		{[]string{"reconcile", "--clock-warn", "soon"}, `--clock-warn \(clock_warn\) "soon": want a positive duration like 2s`},
		{[]string{"health", "--max-stuck", "0", "extra"}, `want no arguments, got 1 argument\(s\)`},
		{[]string{"health", "--config", badValue}, `--max-sending-past-lease \(health.max_sending_past_lease\) "lots": want a count of 0 or more`},
		{[]string{"purge"}, `--older-than is required \(e.g. --older-than 90d\)`},
		{[]string{"purge", "--older-than", "d"}, `--older-than "d": want a duration like 90d, 36h or 30m`},
		{[]string{"purge", "--older-than", "1.5d"}, `--older-than "1.5d": want a duration like 90d, 36h or 30m`},
		{[]string{"purge", "--older-than", "1d-1h"}, `--older-than "1d-1h": must not be negative`},
		{[]string{"purge", "--older-than", "99999999d"}, `--older-than "99999999d": want a duration like 90d, 36h or 30m`},
		{[]string{"purge", "--older-than", "90d", "--dry-run=maybe"}, `invalid argument "maybe" for "--dry-run" flag: .*`},
		{[]string{"purge", "--older-than", "90d", "extra"}, `want no arguments, got 1 argument\(s\)`},
	} {
		args := c.args
		if !slices.Contains(args, "--config") {
			args = append([]string{"--config", cfg}, args...)
		}
		var out, errb bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"--store", "sqlite:" + path}, args...),
			&cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb})
		if code != cli.ExitUsage || out.Len() != 0 || !opsMatch(`^msgq: `+c.err+"\n$", errb.String()) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and msgq: %s", c.args, code, out.String(), errb.String(), c.err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused command created the store (%v)", err)
	}
}

// TestStatsHealthAndPurgeHelp: examples and the exit codes in each help.
func TestStatsHealthAndPurgeHelp(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string][]string{
		"stats":  {"textfile collector", "-o prometheus", "--window", "unreadable", "Examples:", "EXIT STATUS"},
		"health": {"--max-oldest-queued", "MSGQ_HEALTH_MAX_STUCK", "max_oldest_queued: 5m", "Examples:", "4  a check found something"},
		"purge": {"--older-than", "never sent again", "--dry-run", "raw webhook deliveries processed without an error",
			"neither --tenant nor --purpose", "Examples:", "EXIT STATUS"},
	} {
		var out bytes.Buffer
		if code := cli.Run(context.Background(), []string{cmd, "--help"}, &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &out}); code != 0 {
			t.Fatalf("%s --help: exit %d", cmd, code)
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s --help lacks %q", cmd, w)
			}
		}
	}
}
