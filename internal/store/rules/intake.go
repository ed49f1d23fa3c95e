package rules

import (
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// IntakeWrite is what a decision on an intake row writes: the row as it
// becomes (Msg: admitted, queued, with Go's body hash and payload; nil
// for a refusal, which changes only its state, reason and last error) and
// the history entry.
type IntakeWrite struct {
	Msg    *store.Message
	To     state.State
	Reason state.Reason
	// Event is the history entry's event, Detail its detail (and, for a
	// refusal, the row's last error).
	Event, Detail string
}

// Intake decides d at now (the store's clock), through the state machine:
// an admission whose deadline has passed (by now, whatever it was when
// the admission checked it) fails as expired; otherwise the row is queued
// as d.Params says. A refusal fails it as invalid, its field error kept.
func Intake(d store.IntakeDecision, now time.Time) IntakeWrite {
	ev := state.Event{Kind: state.Fail, Reason: state.Invalid}
	var w IntakeWrite
	if d.Params != nil {
		p := *d.Params
		p.Normalize()
		p.Resolve(now)
		if !p.ExpiresAt.IsZero() && !p.ExpiresAt.After(now) {
			ev.Reason = state.Expired
			w.Detail = "its deadline passed before it was admitted (" + p.ExpiresAt.UTC().Format(time.RFC3339) + ")"
		} else {
			ev = state.Event{Kind: state.Admit}
			w.Msg = store.NewMessage(&p, d.ID, now)
		}
	} else {
		w.Detail = d.Invalid
	}
	res, err := state.Transition(state.Intake, ev)
	if err != nil {
		panic(err) // the machine admits, expires and refuses every intake row
	}
	w.To, w.Reason, w.Event = res.To, res.Reason, ev.String()
	if w.Msg != nil {
		w.Msg.State = res.To
	}
	return w
}
