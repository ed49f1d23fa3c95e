package rules

import (
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Expiry is what a claim writes on a queued row whose deadline has
// passed: sending it now would be worthless (docs/design.md).
type Expiry struct {
	Event  state.Event
	Result state.Result
	Detail string // the history row's detail
}

// Expire decides a queued row past its deadline: one none of whose calls
// can have gone out fails as expired; one whose earlier call may have
// (maybe_sent) becomes unknown, for a person to decide.
func Expire(maybeSent bool) (Expiry, error) {
	x := Expiry{Event: state.Event{Kind: state.Fail, Reason: state.Expired}, Detail: "deadline passed before it could be sent"}
	if maybeSent {
		x = Expiry{Event: state.Event{Kind: state.Abandon}, Detail: "deadline passed; an earlier call may have reached the phone"}
	}
	var err error
	x.Result, err = state.Transition(state.Queued, x.Event)
	return x, err
}

// Lease is what a claim writes on each row it takes: the row's new state,
// lease and updated_at, one more attempt, and a history row (From to To
// by Event, Source, Detail, at At).
type Lease struct {
	From, To state.State
	Event    string
	Source   string
	Detail   string
	Owner    string
	// At is the claim's time and Until the lease's end; both zero when
	// the store's statement reads its own clock.
	At, Until time.Time
	// Daily, when set, keeps the claim's daily unique-recipient limits:
	// Take passes over a row it does not admit and counts those it takes.
	Daily *store.DailyLimiter
}

// NewLease is the lease a claim by p makes at now (zero: the statement's
// clock), as the machine allows a claim of a queued row.
func NewLease(p *store.ClaimParams, now time.Time) (Lease, error) {
	res, err := state.Transition(state.Queued, state.Event{Kind: state.Claim})
	if err != nil {
		return Lease{}, err
	}
	l := Lease{From: state.Queued, To: res.To, Event: string(state.Claim), Source: store.SourceDrain, Detail: "lease " + p.Owner, Owner: p.Owner, At: now}
	if !now.IsZero() {
		l.Until = now.Add(p.LeaseFor).Truncate(store.Resolution)
	}
	return l, nil
}

// Take chooses, in candidate order, up to limit of cands (queued rows, as
// read under the claim's lock) that pacing lets go within horizon, and
// leases them: each returned row is as the claim leaves it, with its
// slot. Pacing passes over a candidate whose identity or recipient has
// no slot in the horizon, in favour of later ones.
func (l Lease) Take(cands []*store.Message, pace *store.Pacer, limit int, horizon time.Duration) []store.Claimed {
	var claimed []store.Claimed
	for _, m := range cands {
		if len(claimed) == limit {
			break
		}
		if l.Daily != nil && !l.Daily.Admits(m) {
			continue
		}
		slot, ok := pace.Take(m, l.At, horizon)
		if !ok {
			continue
		}
		if l.Daily != nil {
			l.Daily.Take(m, l.At)
		}
		until := l.Until
		m.State, m.LeaseOwner, m.LeaseUntil, m.Attempts, m.UpdatedAt = l.To, l.Owner, &until, m.Attempts+1, l.At
		claimed = append(claimed, store.Claimed{Message: *m, SlotAt: slot})
	}
	return claimed
}
