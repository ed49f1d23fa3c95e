package store

import "time"

// Pair is an (identity, recipient) pacing key.
type Pair struct{ Identity, Recipient string }

// Pacer is the slot arithmetic of one claim, shared by every store: the
// store loads the current slots (Need names which), the claim takes slots
// row by row, and the store writes back what changed (Changed*).
type Pacer struct {
	limits    map[string]Pacing
	identity  map[string]time.Time
	recipient map[Pair]time.Time
	dirtyID   map[string]bool
	dirtyRcpt map[Pair]bool
}

// NewPacer starts a claim's pacing under limits (by identity; an identity
// without an entry is unpaced).
func NewPacer(limits map[string]Pacing) *Pacer {
	return &Pacer{limits: limits, identity: map[string]time.Time{}, recipient: map[Pair]time.Time{},
		dirtyID: map[string]bool{}, dirtyRcpt: map[Pair]bool{}}
}

// Need lists the identities and pairs whose stored slots the claim must
// load for these candidates. Every paced identity is listed, limits or
// not: a rate limit's deferral applies to identities without one.
func (p *Pacer) Need(cands []*Message) (ids []string, pairs []Pair) {
	seenID, seenPair := map[string]bool{}, map[Pair]bool{}
	for _, m := range cands {
		if _, ok := p.limits[m.Identity]; !ok {
			continue
		}
		if !seenID[m.Identity] {
			seenID[m.Identity] = true
			ids = append(ids, m.Identity)
		}
		k := Pair{m.Identity, m.To}
		if !seenPair[k] {
			seenPair[k] = true
			pairs = append(pairs, k)
		}
	}
	return ids, pairs
}

// LoadIdentity and LoadRecipient record stored slots.
func (p *Pacer) LoadIdentity(id string, next time.Time) { p.identity[id] = next }

// LoadRecipient records a stored recipient slot.
func (p *Pacer) LoadRecipient(k Pair, next time.Time) { p.recipient[k] = next }

// Take returns m's slot (the earliest time its call may start) and
// reserves it, or false when the slot lies at or beyond now+horizon.
func (p *Pacer) Take(m *Message, now time.Time, horizon time.Duration) (time.Time, bool) {
	l, ok := p.limits[m.Identity]
	if !ok {
		return now, true
	}
	slot := now
	k := Pair{m.Identity, m.To}
	if p.identity[m.Identity].After(slot) {
		slot = p.identity[m.Identity]
	}
	if p.recipient[k].After(slot) {
		slot = p.recipient[k]
	}
	if slot.Sub(now) >= horizon {
		return time.Time{}, false
	}
	if l.Spacing > 0 {
		p.identity[m.Identity], p.dirtyID[m.Identity] = slot.Add(l.Spacing), true
	}
	if l.PerRecipient > 0 {
		p.recipient[k], p.dirtyRcpt[k] = slot.Add(l.PerRecipient), true
	}
	return slot, true
}

// ChangedIdentities returns the identity slots to write back.
func (p *Pacer) ChangedIdentities() map[string]time.Time {
	out := map[string]time.Time{}
	for id := range p.dirtyID {
		out[id] = p.identity[id]
	}
	return out
}

// ChangedRecipients returns the recipient slots to write back.
func (p *Pacer) ChangedRecipients() map[Pair]time.Time {
	out := map[Pair]time.Time{}
	for k := range p.dirtyRcpt {
		out[k] = p.recipient[k]
	}
	return out
}
