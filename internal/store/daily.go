package store

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// DailyWindow is the rolling window of the daily unique-recipient limit
// (WhatsApp's messaging tiers count unique customers in 24 hours).
const DailyWindow = 24 * time.Hour

// DailyHeldError begins the last error of a row held by its identity's
// daily unique-recipient limit.
const DailyHeldError = "held: the identity's daily unique-recipient limit is reached"

// DailyRecipients is the part of the store that keeps, per identity, the
// recipients it messaged within DailyWindow: a claim records them in its
// own transaction, so every drain on every host shares one count.
type DailyRecipients interface {
	// DailyRecipientsUsed returns how many unique recipients each named
	// identity was claimed for within DailyWindow of the store's clock.
	DailyRecipientsUsed(ctx context.Context, identities []string) (map[string]int, error)
}

// DailyLimiter is the arithmetic of one claim under daily unique-
// recipient limits, shared by every store: the store loads each limited
// identity's count and which candidate recipients it already messaged
// (Need names them), the claim admits rows one by one, and the store
// records the pairs it claimed and holds the rows it refused.
//
// A recipient counts from the claim of a row to it: the claim is what two
// drains race for, so counting there (under the claim's lock) is what
// keeps them both under the limit. A row given back without a call still
// counts until it leaves the window: the count errs high, never low.
type DailyLimiter struct {
	limits map[string]int
	used   map[string]int
	oldest map[string]time.Time
	recent map[Pair]bool
	taken  map[Pair]bool
	held   map[string][]string // identity -> held message ids
}

// NewDailyLimiter starts a claim under limits (by identity; an identity
// without a positive entry has no limit).
func NewDailyLimiter(limits map[string]int) *DailyLimiter {
	return &DailyLimiter{limits: limits, used: map[string]int{}, oldest: map[string]time.Time{},
		recent: map[Pair]bool{}, taken: map[Pair]bool{}, held: map[string][]string{}}
}

// Need lists the limited identities among cands (sorted, so that claims
// lock them in one order) and their candidate pairs.
func (d *DailyLimiter) Need(cands []*Message) (ids []string, pairs []Pair) {
	seenID, seenPair := map[string]bool{}, map[Pair]bool{}
	for _, m := range cands {
		if d.limits[m.Identity] <= 0 {
			continue
		}
		if !seenID[m.Identity] {
			seenID[m.Identity] = true
			ids = append(ids, m.Identity)
		}
		if k := (Pair{m.Identity, m.To}); !seenPair[k] {
			seenPair[k] = true
			pairs = append(pairs, k)
		}
	}
	sort.Strings(ids)
	return ids, pairs
}

// Load records an identity's count within the window and the time its
// oldest counted recipient was messaged (zero when none).
func (d *DailyLimiter) Load(identity string, used int, oldest time.Time) {
	d.used[identity], d.oldest[identity] = used, oldest
}

// Identities lists the limited identities the claim loaded, sorted.
func (d *DailyLimiter) Identities() []string {
	out := make([]string, 0, len(d.used))
	for id := range d.used {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// LoadRecent records that a candidate's recipient was messaged within
// the window: rows to it go on whatever the count.
func (d *DailyLimiter) LoadRecent(k Pair) { d.recent[k] = true }

// Admits says whether m may be claimed: its identity has no limit, its
// recipient was messaged within the window, or the count is below the
// limit. A refused row is noted as held.
func (d *DailyLimiter) Admits(m *Message) bool {
	limit := d.limits[m.Identity]
	k := Pair{m.Identity, m.To}
	if limit <= 0 || d.recent[k] || d.taken[k] || d.used[m.Identity] < limit {
		return true
	}
	d.held[m.Identity] = append(d.held[m.Identity], m.ID)
	return false
}

// Take counts m's recipient (m was admitted and claimed).
func (d *DailyLimiter) Take(m *Message, now time.Time) {
	k := Pair{m.Identity, m.To}
	if d.limits[m.Identity] <= 0 || d.taken[k] {
		return
	}
	d.taken[k] = true
	if !d.recent[k] {
		d.used[m.Identity]++
		if d.oldest[m.Identity].IsZero() {
			d.oldest[m.Identity] = now
		}
	}
}

// Taken lists the pairs the claim messaged, to record at the claim's
// time (new ones counted, known ones moved to the end of the window).
func (d *DailyLimiter) Taken() []Pair {
	out := make([]Pair, 0, len(d.taken))
	for k := range d.taken {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Identity != out[j].Identity {
			return out[i].Identity < out[j].Identity
		}
		return out[i].Recipient < out[j].Recipient
	})
	return out
}

// DailyHold is a set of rows the limit held, and when they may be tried
// again: when the identity's oldest counted recipient leaves the window,
// the first moment a place can free.
type DailyHold struct {
	Identity string
	IDs      []string
	Until    time.Time
	Error    string
}

// Holds lists the claim's held rows by identity.
func (d *DailyLimiter) Holds(now time.Time) []DailyHold {
	var out []DailyHold
	for id, ids := range d.held {
		until := d.oldest[id].Add(DailyWindow)
		if !until.After(now) {
			until = now.Add(time.Minute)
		}
		out = append(out, DailyHold{Identity: id, IDs: ids, Until: until.Truncate(Resolution),
			Error: fmt.Sprintf("%s (%d unique recipients in %s); next try %s", DailyHeldError, d.limits[id], "24h",
				until.UTC().Format(time.RFC3339))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out
}
