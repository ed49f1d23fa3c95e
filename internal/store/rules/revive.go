package rules

import (
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// A row refused for a policy reason before any call (internal/state's
// Reason.Policy: opted_out) keeps no claim on its key: enqueuing the same
// key with the same body again, once the condition has lifted, revives it
// (state's revive event) instead of replaying the refusal. The store
// reads what the decision needs in the enqueue's own transaction (Facts)
// for the rows Candidates names, and Settle decides.

// Candidate says whether m, found by an enqueue of its key, could be
// revived, before the facts are read: a failed row with a policy reason
// whose condition the store knows how to check, that made no provider
// call (no attempt counted, no answer lost, no provider id) and still has
// its content (a purged row has nothing to send, so it stays a replay).
func Candidate(m *store.Message) bool {
	return m.State == state.Failed && m.Reason.Policy() && checkable(m.Reason) &&
		m.Attempts == 0 && !m.MaybeSent && m.ProviderID == "" && m.Payload != nil
}

// checkable is the policy reasons whose condition an enqueue reads: a
// policy reason added to the machine without a check here is never
// revived (a replay, as before), rather than revived blind.
func checkable(r state.Reason) bool { return r == state.OptedOut }

// Facts is what the store read, in the enqueue's transaction, about a
// candidate row: whether its policy condition still holds (opted_out:
// the recipient is opted out of the row's identity now, in opt_outs) and
// whether any provider call was recorded for it (an attempts row).
type Facts struct {
	Holds  bool
	Called bool
}

// Candidates returns the existing rows of others that are candidates for
// a revival (Candidate) and that an item with the same body meets, once
// each: the rows whose Facts the store must read.
func Candidates(others []Pending, existing map[string]*store.Message) []*store.Message {
	var out []*store.Message
	seen := map[string]bool{}
	for _, r := range others {
		m := existing[Key(r.Msg.Tenant, r.Msg.Key)]
		if m == nil || m.BodyHash != r.Msg.BodyHash || seen[m.ID] || !Candidate(m) {
			continue
		}
		seen[m.ID] = true
		out = append(out, m)
	}
	return out
}

// Revival is what reviving one row writes: the row back to queued
// (conditional on it still being failed with Reason and no attempt),
// scheduled as the new enqueue asks (NextAt, ExpiresAt: nil is no
// deadline), its last error cleared, and its history row.
type Revival struct {
	ID        string
	Reason    state.Reason // the reason the row is failed with; the write is conditional on it
	At        time.Time
	NextAt    time.Time
	ExpiresAt *time.Time
	History   store.HistoryEntry
}

// ReviveDetail is the history detail of the revival of m.
func ReviveDetail(m *store.Message) string {
	return "enqueued again after a policy refusal that sent nothing: the recipient is no longer opted out of " + m.Identity
}

// revive decides whether the existing row m, met by the new row n (same
// key, same body), revives, and with what write. ok false: a replay.
func revive(m, n *store.Message, f Facts, known bool, now time.Time) (Revival, *store.Message, bool) {
	if !known || !Candidate(m) || f.Holds || f.Called {
		return Revival{}, nil, false
	}
	ev := state.Event{Kind: state.Revive, Reason: m.Reason}
	res, err := state.Transition(m.State, ev)
	if err != nil || !res.Applied {
		return Revival{}, nil, false
	}
	v := Revival{ID: m.ID, Reason: m.Reason, At: now, NextAt: n.NextAttemptAt, ExpiresAt: n.ExpiresAt,
		History: store.HistoryEntry{MessageID: m.ID, From: m.State, To: res.To, Reason: res.Reason, Event: ev.String(),
			Applied: true, Source: store.SourceSend, Detail: ReviveDetail(m), At: now}}
	after := *m
	after.State, after.Reason = res.To, res.Reason
	after.NextAttemptAt, after.ExpiresAt = v.NextAt, v.ExpiresAt
	after.LastError, after.UpdatedAt = "", now
	return v, &after, true
}
