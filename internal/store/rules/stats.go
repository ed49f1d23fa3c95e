package rules

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// StatsWindow is the span of the recent figures p asks for.
func StatsWindow(p *store.StatsParams) time.Duration {
	if p.Window <= 0 {
		return store.DefaultStatsWindow
	}
	return p.Window
}

// NewStats is Stats at now over window before the store reads a figure:
// the lists and maps empty, not nil (the JSON says [] and {}), and every
// failure reason at zero.
func NewStats(p *store.StatsParams, now time.Time, window time.Duration) *store.Stats {
	st := &store.Stats{At: now.UTC(), Counts: []store.StateCount{}, AttemptsByClass: map[string]int{}, Window: window}
	v := &st.VitalStats
	v.RecentFailures, v.MaybeSent, v.SentProgress = map[string]int{}, map[string]int{}, []store.SentProgress{}
	for _, r := range store.FailureReasons {
		v.RecentFailures[string(r)] = 0
	}
	v.NoProgressAfter = p.NoProgressAfter
	if v.NoProgressAfter <= 0 {
		v.NoProgressAfter = store.DefaultNoProgressAfter
	}
	return st
}

// Bounds are the times Stats' queries count from, of one Stats at now.
type Bounds struct {
	Since        time.Time // the window's start
	SinceMinute  int64     // its minute, in the per-minute counts (store.MinuteBucket)
	LongSending  time.Time // a row in sending claimed at or before this counts in SendingLong
	LeaseOver    time.Time // a lease that ended at or before this is past
	SentProgress time.Time // a row sent at or before this counts in SentProgress
}

// StatsBounds are st's bounds (st from NewStats).
func StatsBounds(st *store.Stats) Bounds {
	since := st.At.Add(-st.Window)
	return Bounds{Since: since, SinceMinute: store.MinuteBucket(since), LongSending: st.At.Add(-store.LongSending),
		LeaseOver: st.At, SentProgress: st.At.Add(-st.NoProgressAfter)}
}

// AddCount records the rows of one identity in one state.
func AddCount(st *store.Stats, c store.StateCount) {
	if c.State == state.Unknown {
		st.Unknown += c.N
	}
	st.Counts = append(st.Counts, c)
}

// AddDue records the due time of one lane's oldest eligible row: the
// oldest of the lanes' is the figure.
func AddDue(st *store.Stats, due time.Time) {
	if st.OldestEligible == nil || due.Before(*st.OldestEligible) {
		t := due.UTC()
		st.OldestEligible = &t
	}
}

// SetLatencies records the sent-to-delivered latencies of the window's
// deliveries (those delivered without having been sent first have none).
func SetLatencies(st *store.Stats, lat []time.Duration) {
	slices.Sort(lat)
	st.DeliveryP50, st.DeliveryP95 = store.Percentile(lat, 0.50), store.Percentile(lat, 0.95)
}

// SetFirstDeliveries records the creation-to-first-delivery latencies of
// the challenges whose first delivered evidence arrived within the window.
func SetFirstDeliveries(v *store.ChallengeVitals, lat []time.Duration) {
	slices.Sort(lat)
	v.RecentFirstDeliveries = len(lat)
	v.FirstDeliveryP50, v.FirstDeliveryP95 = store.Percentile(lat, 0.50), store.Percentile(lat, 0.95)
}

// SetSentProgress records the sent progress the store counted (got, by
// identity): every identity asked about, zeros included, in the order
// asked.
func SetSentProgress(st *store.Stats, asked []string, got map[string]store.SentProgress) {
	for _, id := range asked {
		sp := got[id]
		sp.Identity = id
		st.SentProgress = append(st.SentProgress, sp)
	}
}

// Count is one running count an enqueue adds to: the total (counters),
// this minute's count (counts_by_minute) and the minute counts to drop,
// those before DropBefore.
type Count struct {
	Name       string
	N          int
	Minute     int64
	DropBefore int64
}

// RefusedCounts are the counts an enqueue at now adds its replays and
// key conflicts (writes the unique index refused) to; none at zero. The
// minute counts are kept store.CountBuckets.
func RefusedCounts(now time.Time, replays, conflicts int) []Count {
	minute := store.MinuteBucket(now)
	var out []Count
	for _, c := range []Count{{Name: store.CounterKeyReplays, N: replays}, {Name: store.CounterKeyConflicts, N: conflicts}} {
		if c.N == 0 {
			continue
		}
		c.Minute, c.DropBefore = minute, minute-int64(store.CountBuckets/time.Second)
		out = append(out, c)
	}
	return out
}

// SetCounters records the figures Stats reads from the store's running
// counts (counters by name, as read in Stats' transaction): the totals of
// key replays, key conflicts and duplicate webhooks, and those kept by the
// stores' triggers (store.CounterResends and the rest).
func SetCounters(st *store.Stats, c map[string]int64) {
	v := &st.VitalStats
	st.KeyReplays, v.KeyConflicts, st.DuplicateWebhooks = c[store.CounterKeyReplays], c[store.CounterKeyConflicts], c[store.CounterDuplicateWebhooks]
	v.Resends = int(c[store.CounterResends])
	w := &st.WebhookStats
	w.ParkedEvidence, w.UnattributedInbound = int(c[store.CounterParkedEvidence]), int(c[store.CounterUnattributedInbound])
	w.ReplayedWebhooks = c[store.CounterReplayedWebhooks]
	w.SuspectEvidence, w.ProviderIDCollisions = int(c[store.CounterSuspectEvidence]), int(c[store.CounterProviderIDCollisions])
	w.UnreadableWebhooks, w.Notices, w.UnknownNotices = int(c[store.CounterUnreadableWebhooks]), int(c[store.CounterNotices]),
		int(c[store.CounterUnknownNotices])
	ch := &v.Challenges
	ch.SupersedingSends, ch.FallbacksFired = int(c[store.CounterSupersedingSends]), int(c[store.CounterFallbacksFired])
	if ch.CompletedByStep == nil {
		ch.CompletedByStep = map[string]int{}
	}
	for name, n64 := range c {
		n := int(n64)
		if n <= 0 {
			continue
		}
		if s, ok := strings.CutPrefix(name, store.CounterMaybeSent); ok {
			v.MaybeSent[s] += n
		} else if s, ok := strings.CutPrefix(name, store.CounterChallenges); ok {
			// challenges:<outcome>:<step>
			outcome, step, _ := strings.Cut(s, ":")
			by, _ := strconv.Atoi(step)
			ch.Add(outcome, by, false, n)
		}
	}
}
