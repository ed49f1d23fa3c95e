package rules

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func TestNewStatsStartsEmptyNotNil(t *testing.T) {
	p := &store.StatsParams{}
	st := NewStats(p, t0, StatsWindow(p))
	if st.Window != store.DefaultStatsWindow || st.NoProgressAfter != store.DefaultNoProgressAfter || !st.At.Equal(t0) {
		t.Fatalf("%+v", st)
	}
	if len(st.RecentFailures) != len(store.FailureReasons) || st.RecentFailures[string(state.Expired)] != 0 {
		t.Fatalf("failures %v", st.RecentFailures)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"counts":[]`, `"attempts_by_class":{}`, `"maybe_sent_by_state":{}`, `"sent_progress":[]`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("%s not in %s", want, b)
		}
	}
	p = &store.StatsParams{Window: time.Minute, NoProgressAfter: time.Second}
	if st := NewStats(p, t0, StatsWindow(p)); st.Window != time.Minute || st.NoProgressAfter != time.Second {
		t.Fatalf("%+v", st)
	}
}

func TestStatsBounds(t *testing.T) {
	now := t0.Add(90 * time.Second)
	p := &store.StatsParams{Window: time.Hour}
	b := StatsBounds(NewStats(p, now, StatsWindow(p)))
	if !b.Since.Equal(now.Add(-time.Hour)) || b.SinceMinute != store.MinuteBucket(now.Add(-time.Hour)) || b.SinceMinute%60 != 0 ||
		!b.LongSending.Equal(now.Add(-store.LongSending)) || !b.LeaseOver.Equal(now) ||
		!b.SentProgress.Equal(now.Add(-store.DefaultNoProgressAfter)) {
		t.Fatalf("%+v", b)
	}
}

func TestStatsFigures(t *testing.T) {
	st := NewStats(&store.StatsParams{}, t0, time.Hour)
	AddCount(st, store.StateCount{Identity: "a", State: state.Unknown, N: 2})
	AddCount(st, store.StateCount{Identity: "a", State: state.Queued, N: 5})
	AddCount(st, store.StateCount{Identity: "b", State: state.Unknown, N: 1})
	if st.Unknown != 3 || len(st.Counts) != 3 {
		t.Fatalf("%+v", st)
	}
	AddDue(st, t0.Add(-time.Minute))
	AddDue(st, t0.Add(-time.Hour))
	AddDue(st, t0)
	if st.OldestEligible == nil || !st.OldestEligible.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("oldest %v", st.OldestEligible)
	}
	SetLatencies(st, []time.Duration{3 * time.Second, time.Second, 2 * time.Second})
	if st.DeliveryP50 != 2*time.Second || st.DeliveryP95 != 3*time.Second {
		t.Fatalf("p50 %v p95 %v", st.DeliveryP50, st.DeliveryP95)
	}
	SetSentProgress(st, []string{"b", "a"}, map[string]store.SentProgress{"a": {Identity: "a", Sent: 4, WithoutProgress: 1}})
	if got := st.SentProgress; len(got) != 2 || got[0] != (store.SentProgress{Identity: "b"}) || got[1].Sent != 4 {
		t.Fatalf("progress %+v", got)
	}
}

func TestRefusedCounts(t *testing.T) {
	if got := RefusedCounts(t0, 0, 0); len(got) != 0 {
		t.Fatalf("%+v", got)
	}
	got := RefusedCounts(t0.Add(42*time.Second), 0, 3)
	m := store.MinuteBucket(t0)
	if len(got) != 1 || got[0].Name != store.CounterKeyConflicts || got[0].N != 3 || got[0].Minute != m ||
		got[0].DropBefore != m-int64(store.CountBuckets/time.Second) {
		t.Fatalf("%+v", got)
	}
	if got := RefusedCounts(t0, 1, 2); len(got) != 2 || got[0].Name != store.CounterKeyReplays || got[1].N != 2 {
		t.Fatalf("%+v", got)
	}
}
