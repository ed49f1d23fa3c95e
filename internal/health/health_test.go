package health_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/store"
)

func TestParseRefusesBadSettingsAndNone(t *testing.T) {
	for _, c := range []struct {
		name string
		h    health.Settings
		want string
	}{
		{"none", health.Settings{}, "no thresholds"},
		{"a negative count", health.Settings{MaxStuck: "-1"}, `--max-stuck (health.max_stuck) "-1": want a count of 0 or more`},
		{"an age that is not one", health.Settings{MaxOldestQueued: "soon"}, `--max-oldest-queued (health.max_oldest_queued) "soon"`},
		{"a share past 1", health.Settings{MaxDailyShare: "1.5"}, "want a share from 0 to 1"},
		{"a vital's bad count", health.Settings{Vitals: map[string]string{"max_resends": "x"}}, `--max-resends (health.max_resends) "x"`},
	} {
		_, err := health.Parse(c.h)
		var se *health.SettingError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a SettingError containing %q", c.name, err, c.want)
		}
	}
	if _, _, err := health.Windows(health.Settings{Window: "0s"}); err == nil {
		t.Errorf("a zero window was accepted")
	}
}

func TestEvaluateCrossesOnlyWhatIsPastItsMax(t *testing.T) {
	ts, err := health.Parse(health.Settings{MaxOldestQueued: "5m", MaxStuck: "0", MaxUnknown: "3", MaxDailyShare: "0.9",
		Vitals: map[string]string{"max_unsendable": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	due := at.Add(-10 * time.Minute)
	s := &store.Stats{At: at, OldestEligible: &due, SendingPastLease: 1, Unknown: 2}
	res, err := health.Evaluate(ts, health.Input{
		Stats:      s,
		Unsendable: []health.Unsendable{{Identity: "wa", Queued: 4, Why: "WA_TOKEN not set"}},
		DailyShare: func(max int64) (int64, string, error) { return 500, "half used", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		value   int64
		crossed bool
		msg     string
	}{
		"max_oldest_queued":   {int64(10 * time.Minute), true, "oldest eligible queued row is 10m old (max 5m)"},
		"max_stuck":           {3, true, "3 rows stuck: 1 in sending past the lease, 2 unknown (max 0)"},
		"max_unknown":         {2, false, ""},
		health.DailyShareName: {500, false, ""},
		"max_unsendable":      {4, true, "4 rows queued for identities that cannot send from here: wa 4 (WA_TOKEN not set) (max 0)"},
	}
	if res.OK || len(res.Checks) != len(want) || !res.At.Equal(at) {
		t.Fatalf("result %+v, want not ok with %d checks at %v", res, len(want), at)
	}
	for _, c := range res.Checks {
		w := want[c.Name]
		if c.Value != w.value || c.Crossed != w.crossed || c.Message != w.msg {
			t.Errorf("%s: value %d crossed %v %q; want %d %v %q", c.Name, c.Value, c.Crossed, c.Message, w.value, w.crossed, w.msg)
		}
	}
	if _, err := health.Evaluate(ts, health.Input{Stats: s, DailyShare: func(int64) (int64, string, error) {
		return 0, "", errors.New("store down")
	}}); err == nil {
		t.Errorf("a failed daily-share measure was not an error")
	}
}

// TestHealthWatchesTheSQLIntake: rows PostgreSQL's enqueue() took in that
// wait for an admission no process gives them, and rows it refused, fire
// their checks; a store with none (SQLite, or an intake kept up with)
// passes them.
func TestHealthWatchesTheSQLIntake(t *testing.T) {
	ts, err := health.Parse(health.Settings{Vitals: map[string]string{"max_oldest_intake": "1m", "max_failed_invalid": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	taken := at.Add(-5 * time.Minute)
	s := &store.Stats{At: at, Window: time.Hour, OldestIntake: &taken}
	s.RecentFailures = map[string]int{"invalid": 2}
	res, err := health.Evaluate(ts, health.Input{Stats: s})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"max_oldest_intake":  "the oldest row taken in by enqueue() has waited 5m for its admission (max 1m): is a drain or msgq serve running with its identity's config?",
		"max_failed_invalid": "2 rows failed as invalid in the last 1h (max 0)",
	}
	if res.OK || len(res.Checks) != 2 {
		t.Fatalf("result %+v; want both crossed", res)
	}
	for _, c := range res.Checks {
		if !c.Crossed || c.Message != want[c.Name] {
			t.Errorf("%s: crossed %v %q; want %q", c.Name, c.Crossed, c.Message, want[c.Name])
		}
	}
	if res, err := health.Evaluate(ts, health.Input{Stats: &store.Stats{At: at, Window: time.Hour}}); err != nil || !res.OK {
		t.Errorf("no intake, no refusal: %+v, %v; want ok", res, err)
	}
}
