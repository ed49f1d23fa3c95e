// Package state is msgq's message state machine: the states a logical send
// can be in, their ranks, the events that move a row, and the one transition
// function every store writes through. It does no I/O; see MACHINE.md beside
// this file for the drawing.
package state

import (
	"errors"
	"fmt"
)

// State is where one logical send stands.
type State string

// The states. Keep this set small: detail belongs in Reason and in history.
const (
	// None is the state before a row exists; only Enqueue leaves it.
	None State = ""
	// Intake is a row PostgreSQL's enqueue() took in inside an
	// application's transaction, its input checked only for what must be
	// synchronous (the key, the identity's name): no drain claims it
	// until the Go admission (internal/queue) admits it to queued or
	// fails it as invalid (docs/sql-enqueue.md).
	Intake    State = "intake"
	Queued    State = "queued"
	Sending   State = "sending"
	Unknown   State = "unknown"
	Sent      State = "sent"
	Failed    State = "failed"
	Delivered State = "delivered"
	Read      State = "read"
)

// All lists every state a row can be in, in rank order.
var All = []State{Intake, Queued, Sending, Unknown, Sent, Failed, Delivered, Read}

// Rank orders states for provider evidence, which only moves a row forward.
// sending and unknown share a rank: both mean "a call may be out there".
// failed ranks below delivered so that a stale failure never overwrites
// a delivery the customer already has.
func (s State) Rank() int {
	switch s {
	case Intake, Queued:
		return 0
	case Sending, Unknown:
		return 1
	case Sent:
		return 2
	case Failed:
		return 3
	case Delivered:
		return 4
	case Read:
		return 5
	}
	return -1
}

// Valid reports whether s is one of the row states (None is not).
func (s State) Valid() bool { return s.Rank() >= 0 }

// Finished reports whether drain is done with the row: it will never be
// claimed again. Only provider evidence may still move it (forward).
func (s State) Finished() bool {
	switch s {
	case Sent, Failed, Delivered, Read:
		return true
	}
	return false
}

// InFlight reports whether a provider call may have gone out and nobody
// knows its result yet: the rows an operator must be shown.
func (s State) InFlight() bool { return s == Sending || s == Unknown }

// Parse returns the state named s, or an error naming the valid ones.
func Parse(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return None, fmt.Errorf("unknown state %q (want one of intake, queued, sending, unknown, sent, failed, delivered, read)", s)
	}
	return st, nil
}

// Reason says why a row is failed. It is empty for every other state.
type Reason string

// The failure reasons.
const (
	NoReason  Reason = ""
	Permanent Reason = "permanent" // the provider refused the message for good
	Expired   Reason = "expired"   // the deadline (expires_at) passed before it could go out
	Exhausted Reason = "exhausted" // max attempts reached with retryable answers
	Canceled  Reason = "canceled"  // an operator stopped it before it went out
	Resolved  Reason = "resolved"  // an operator decided an uncertain send failed
	// OptedOut is a policy refusal: the recipient opted out of the
	// identity (an inbound STOP, or the provider's own opted-out answer,
	// Twilio 21610). Nothing went out, so the row keeps no claim on its
	// key: a later enqueue of the same key revives it (Revive).
	OptedOut Reason = "opted_out"
	// Invalid is an intake row the admission refused: the input
	// enqueue() took in is not a valid send (the row's last_error names
	// the field). Nothing went out.
	Invalid Reason = "invalid"
)

// Policy says whether r is a policy refusal: the row failed before
// anything went out, for a condition that can change (an opt-out lifted),
// and may be revived by a new enqueue of its key.
func (r Reason) Policy() bool { return r == OptedOut }

// Valid reports whether r is a known failure reason (not NoReason).
func (r Reason) Valid() bool {
	switch r {
	case Permanent, Expired, Exhausted, Canceled, Resolved, OptedOut, Invalid:
		return true
	}
	return false
}

// Kind names what happened to a row.
type Kind string

// The event kinds. Source of each in brackets.
const (
	Enqueue      Kind = "enqueue"       // [send] a new row is created
	TakeIn       Kind = "take_in"       // [sql] PostgreSQL's enqueue() creates a row, not yet admitted
	Admit        Kind = "admit"         // [admission] an intake row is a valid send: it is queued
	Claim        Kind = "claim"         // [drain] the row is leased for a provider call
	Accept       Kind = "accept"        // [drain] the provider accepted the call
	Retry        Kind = "retry"         // [drain] a definite retryable answer: the call provably did not go through, or the provider dedupes by key
	Ambiguous    Kind = "ambiguous"     // [drain] the call may have gone through and the provider cannot dedupe
	Fail         Kind = "fail"          // [drain] permanent refusal, attempts exhausted, or deadline passed (Reason says which)
	Cancel       Kind = "cancel"        // [operator] stop a row that has not gone out
	Abandon      Kind = "abandon"       // [drain] attempts or the deadline ran out after a call that may have gone out
	LeaseExpired Kind = "lease_expired" // [reconcile] the lease holder vanished mid-call
	LeaseRequeue Kind = "lease_requeue" // [reconcile] as LeaseExpired, for a provider that dedupes by key
	Evidence     Kind = "evidence"      // [webhook, reconcile] the provider reports a status
	Resolve      Kind = "resolve"       // [operator] a verdict on an uncertain row
	Revive       Kind = "revive"        // [send] the same key enqueued again after a policy refusal (nothing went out)
)

// Event is one thing that happened to a row.
type Event struct {
	Kind Kind
	// Status is the reported status for Evidence (sent, delivered, read or
	// failed) and the verdict for Resolve (sent or failed).
	Status State
	// Reason is the failure reason for Fail (permanent, expired, exhausted
	// or opted_out), and for Revive the failed row's own reason (the
	// machine is told it here because only a policy refusal is revived).
	Reason Reason
}

func (e Event) String() string {
	switch {
	case e.Status != None:
		return fmt.Sprintf("%s(%s)", e.Kind, e.Status)
	case e.Reason != NoReason:
		return fmt.Sprintf("%s(%s)", e.Kind, e.Reason)
	}
	return string(e.Kind)
}

// Result is what a transition decides.
type Result struct {
	To     State
	Reason Reason // set when Applied and To is Failed (a not-applied result keeps the row's own reason)
	// Applied is false when the event is recorded in history but does not
	// change the row: stale evidence (a late "sent" after "delivered", a
	// "failed" after "delivered") or a repeat of the current status.
	Applied bool
}

// ErrRefused is matched by every *RefusedError.
var ErrRefused = errors.New("transition refused")

// RefusedError is a transition the machine does not allow.
type RefusedError struct {
	From  State
	Event Event
	Why   string
}

func (e *RefusedError) Error() string {
	from := string(e.From)
	if e.From == None {
		from = "(none)"
	}
	return fmt.Sprintf("cannot %s a row in state %s: %s", e.Event, from, e.Why)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func refuse(from State, ev Event, why string) (Result, error) {
	return Result{}, &RefusedError{From: from, Event: ev, Why: why}
}

func move(to State) (Result, error) { return Result{To: to, Applied: true}, nil }

func fail(r Reason) (Result, error) { return Result{To: Failed, Reason: r, Applied: true}, nil }

// Transition is the state machine: the only place that decides where a row
// in state from goes on event ev. Stores call it with the state they read and
// write the result conditionally on that state still holding.
func Transition(from State, ev Event) (Result, error) {
	if from != None && !from.Valid() {
		return refuse(from, ev, "unknown state")
	}
	if from == None && ev.Kind != Enqueue && ev.Kind != TakeIn {
		return refuse(from, ev, "the row does not exist")
	}
	switch ev.Kind {
	case Enqueue:
		if from != None {
			return refuse(from, ev, "the row already exists")
		}
		return move(Queued)

	case TakeIn:
		if from != None {
			return refuse(from, ev, "the row already exists")
		}
		return move(Intake)

	case Admit:
		if from != Intake {
			return refuse(from, ev, "only an intake row is admitted")
		}
		return move(Queued)

	case Claim:
		if from != Queued {
			return refuse(from, ev, "only queued rows are claimed")
		}
		return move(Sending)

	case Accept:
		if from != Sending {
			return refuse(from, ev, "only the lease holder of a sending row records the provider's answer")
		}
		return move(Sent)

	case Retry:
		// The one backward move: the call provably did not go through (or
		// the provider dedupes by key), so sending it again cannot duplicate.
		if from != Sending {
			return refuse(from, ev, "only a sending row is put back for a retry")
		}
		return move(Queued)

	case Ambiguous:
		if from != Sending {
			return refuse(from, ev, "only a sending row can have an ambiguous answer")
		}
		return move(Unknown)

	case Fail:
		switch ev.Reason {
		case Permanent, Exhausted:
			if from != Sending {
				return refuse(from, ev, "only the answer to a call fails a row as "+string(ev.Reason))
			}
		case Expired:
			// A queued row past its deadline fails without a call; a sending
			// row whose retry would land past it fails on the answer; an
			// intake row whose deadline passed before it was admitted never
			// goes out.
			if from != Intake && from != Queued && from != Sending {
				return refuse(from, ev, "only an intake, queued or sending row can expire")
			}
		case Invalid:
			if from != Intake {
				return refuse(from, ev, "only an intake row is refused as invalid: every other row was admitted")
			}
		case OptedOut:
			// Refused before any call (the drain found the opt-out) or by
			// the provider's definite opted-out answer: nothing went out.
			if from != Queued && from != Sending {
				return refuse(from, ev, "only a queued or sending row is refused for an opt-out")
			}
		default:
			return refuse(from, ev, "fail needs reason permanent, expired, exhausted, opted_out or invalid")
		}
		return fail(ev.Reason)

	case Cancel:
		// An intake row has not even been admitted: nothing of it went out.
		if from != Queued && from != Intake {
			return refuse(from, ev, "only a queued row has certainly not gone out")
		}
		return fail(Canceled)

	case Abandon:
		// An earlier call's answer was lost and the row was retried with
		// the same key (the provider dedupes): when retries then run out,
		// that first call may still have reached the phone. Failing the
		// row would invite a resend; unknown keeps it before an operator.
		if from != Queued && from != Sending {
			return refuse(from, ev, "only a queued or sending row is abandoned")
		}
		return move(Unknown)

	case LeaseExpired:
		if from != Sending {
			return refuse(from, ev, "only a sending row has a lease")
		}
		return move(Unknown)

	case LeaseRequeue:
		if from != Sending {
			return refuse(from, ev, "only a sending row has a lease")
		}
		return move(Queued)

	case Evidence:
		return evidence(from, ev)

	case Revive:
		// The second backward move: a row refused for a policy reason
		// provably went nowhere, so enqueuing its key again (the opt-out
		// lifted) sends it rather than replaying the refusal.
		if from != Failed {
			return refuse(from, ev, "only a failed row is revived")
		}
		if !ev.Reason.Policy() {
			return refuse(from, ev, "only a row refused for a policy reason (opted_out) went nowhere and may be revived")
		}
		return move(Queued)

	case Resolve:
		if from != Unknown && from != Sending {
			// The store also checks that a sending row's lease has expired:
			// a live lease means a drain still owns the answer.
			return refuse(from, ev, "only an unknown or abandoned sending row needs a verdict")
		}
		switch ev.Status {
		case Sent:
			return move(Sent)
		case Failed:
			return fail(Resolved)
		}
		return refuse(from, ev, "a verdict is sent or failed")
	}
	return refuse(from, ev, "unknown event")
}

// evidence applies a provider-reported status forward-only by rank.
func evidence(from State, ev Event) (Result, error) {
	if from == Intake {
		return refuse(from, ev, "an intake row has not been admitted, so nothing of it was sent")
	}
	switch ev.Status {
	case Sent, Delivered, Read:
	case Failed:
		// A provider failure is the provider refusing the message.
		if from.Rank() < Failed.Rank() {
			return fail(Permanent)
		}
		return Result{To: from}, nil
	default:
		return refuse(from, ev, "evidence is sent, delivered, read or failed")
	}
	if ev.Status.Rank() > from.Rank() {
		return move(ev.Status)
	}
	// Stale or repeated: recorded, not applied. A late "sent" never
	// overwrites "delivered"; a repeat "delivered" changes nothing.
	return Result{To: from}, nil
}
