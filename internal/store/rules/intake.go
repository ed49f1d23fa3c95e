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

// Intake decides d at now (the store's clock), through the state machine.
// An admission is queued as d.Params says, once they pass the store's own
// check at now: a deadline passed by now (whatever it was when the
// admission checked it) fails the row as expired, and parameters the
// store refuses fail it as invalid (the admission checks far more, so
// this is a guard, never the rule). A decision of expiry fails it as
// expired, a refusal as invalid with its field error kept.
func Intake(d store.IntakeDecision, now time.Time) IntakeWrite {
	ev := state.Event{Kind: state.Fail, Reason: state.Invalid}
	var w IntakeWrite
	switch {
	case d.Params != nil:
		p := *d.Params
		p.Normalize()
		p.Resolve(now)
		if !p.ExpiresAt.IsZero() && !p.ExpiresAt.After(now) {
			ev.Reason = state.Expired
			w.Detail = "its deadline passed before it was admitted (" + p.ExpiresAt.UTC().Format(time.RFC3339) + ")"
		} else if err := p.Validate(now); err != nil {
			w.Detail = err.Error()
		} else {
			ev = state.Event{Kind: state.Admit}
			w.Msg = store.NewMessage(&p, d.ID, now)
		}
	case d.Expired:
		ev.Reason = state.Expired
		w.Detail = "its deadline passed before it was admitted"
	default:
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
