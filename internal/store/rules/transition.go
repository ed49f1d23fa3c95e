package rules

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Row is what a transition reads of its row.
type Row struct {
	State      state.State
	LeaseOwner string
	LeaseUntil *time.Time
}

// Machine is the part of a transition's check that needs no row: the
// event must be one MessageTransition takes, and the machine must allow
// it from p.From. A store that writes conditionally (PostgreSQL's drain
// batches) calls it before it has read the row, then Check on the rows
// its write did not change.
func Machine(p *store.TransitionParams) (state.Result, error) {
	if p.Event.Kind == state.Claim || p.Event.Kind == state.Enqueue {
		return state.Result{}, &store.InvalidError{Field: "event", Msg: string(p.Event.Kind) + " has its own store method"}
	}
	return state.Transition(p.From, p.Event)
}

// At is the time p is written at: its own Now when it has one, else
// clock (zero when the store's statement reads its own clock).
func At(p *store.TransitionParams, clock time.Time) time.Time {
	if !p.Now.IsZero() {
		return p.Now.UTC().Truncate(store.Resolution)
	}
	return clock
}

// Check decides p against its row as read under the write's lock, at the
// store's clock (zero: p needs none, as no event but a takeover or a
// verdict does). The time returned is the one to write at (zero: the
// store's clock at the write); errors are the item's own
// (store.IsItemError): *InvalidError, *state.RefusedError, ErrStale (the
// row moved on, or another drain holds it) and ErrLeaseLive.
func Check(p *store.TransitionParams, r Row, clock time.Time) (state.Result, time.Time, error) {
	res, err := Machine(p)
	if err != nil {
		return res, time.Time{}, err
	}
	now := At(p, clock)
	if r.State != p.From || !p.LeaseMatches(r.LeaseOwner, r.LeaseUntil) {
		return res, now, fmt.Errorf("%w: message %s is %s (leased by %q), expected %s", store.ErrStale, p.ID, r.State, r.LeaseOwner, p.From)
	}
	// A verdict on (or a takeover of) a sending row is only for one whose
	// drain vanished: a lease not over yet (its end plus the takeover
	// margin) means a drain may still be mid-call and owns the answer.
	if store.NeedsExpiredLease(p.Event.Kind) && r.State == state.Sending && r.LeaseUntil != nil && !store.LeaseOver(*r.LeaseUntil, now) {
		return res, now, store.LeaseLiveError(p.ID, r.LeaseOwner, *r.LeaseUntil)
	}
	return res, now, nil
}

// After is the row as a later item of the same batch sees it once res
// is written.
func (r Row) After(res state.Result) Row {
	if res.Applied {
		r.State = res.To
		if res.To != state.Sending {
			r.LeaseOwner, r.LeaseUntil = "", nil
		}
	}
	return r
}

// Write is what one allowed transition writes: the row's new columns
// (conditional on From and, when LeaseOwner is set, the lease), its
// history row and its attempt row.
type Write struct {
	ID   string
	From state.State
	// LeaseOwner and LeaseUntil (zero: any) are the lease the write is
	// conditional on; LeaseOwner "" is no lease condition.
	LeaseOwner string
	LeaseUntil time.Time
	// At is the write's time (updated_at, the history row); zero is the
	// store's clock at the write.
	At time.Time

	Applied bool // the machine moves the row: State and Reason change
	State   state.State
	Reason  state.Reason
	// ClearLease empties lease_owner and lease_until: the row leaves
	// sending.
	ClearLease bool
	// Next, when set, is the row's next_attempt_at (it goes back to the
	// queue): NextAt, or when that is zero At plus NextIn.
	Next   bool
	NextAt time.Time
	NextIn time.Duration

	ProviderID string // "" keeps the row's; set, it also checks for a collision (migration 0008)
	MaybeSent  bool   // sets maybe_sent (never clears it)
	NoCall     bool   // gives back the attempt the claim counted
	LastError  string // "" keeps the row's
	Resolution string // "" keeps the row's

	Record
}

// Record is the evidence rows of a transition: its history row and its
// attempt (nil: none).
type Record struct {
	History store.HistoryEntry
	Attempt *store.Attempt
}

// Plan is the write of p, which the machine allowed with res, at at
// (zero: the store's clock at the write).
func Plan(p *store.TransitionParams, res state.Result, at time.Time) Write {
	w := Write{
		ID: p.ID, From: p.From, LeaseOwner: p.LeaseOwner, At: at,
		Applied: res.Applied, State: res.To, Reason: res.Reason,
		ProviderID: p.ProviderID, MaybeSent: p.MaybeSent, NoCall: p.NoCall, LastError: p.LastError, Resolution: p.Resolution,
		Record: Record{History: store.HistoryEntry{MessageID: p.ID, From: p.From, To: res.To, Reason: res.Reason, Event: p.Event.String(),
			Applied: res.Applied, Source: p.Source, Detail: p.Detail, At: at}, Attempt: attempt(p)},
	}
	if p.LeaseOwner != "" && !p.LeaseUntil.IsZero() {
		w.LeaseUntil = p.LeaseUntil.UTC().Truncate(store.Resolution)
	}
	if res.Applied {
		w.ClearLease = res.To != state.Sending
		if res.To == state.Queued {
			w.Next = true
			switch {
			case !p.NextAttemptAt.IsZero():
				w.NextAt = p.NextAttemptAt.UTC().Truncate(store.Resolution)
			case !at.IsZero():
				w.NextAt = at.Add(max(p.NextAttemptIn, 0)).Truncate(store.Resolution)
			default:
				w.NextIn = max(p.NextAttemptIn, 0)
			}
		}
	}
	return w
}

// Kept is what a transition that lost to a row that moved on writes when
// p.KeepIfStale: a history row that changes nothing (saying what the row
// is now) and p's attempt. The row itself is not touched.
func Kept(p *store.TransitionParams, r Row, at time.Time) Record {
	return Record{History: store.HistoryEntry{MessageID: p.ID, From: r.State, To: r.State, Event: p.Event.String(), Applied: false,
		Source: p.Source, Detail: store.StaleDetail(p, r.State, r.LeaseOwner, r.LeaseUntil), At: at}, Attempt: attempt(p)}
}

// attempt is p's attempt row at the store's resolution, or nil.
func attempt(p *store.TransitionParams) *store.Attempt {
	if p.Attempt == nil {
		return nil
	}
	a := *p.Attempt
	a.MessageID = p.ID
	a.StartedAt, a.FinishedAt = a.StartedAt.UTC().Truncate(store.Resolution), a.FinishedAt.UTC().Truncate(store.Resolution)
	return &a
}
