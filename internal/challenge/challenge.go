// Package challenge decides the fate of a verification challenge: one
// logical send with ordered steps (say an email, then an SMS) and one
// deadline. It is pure, like internal/state: the store reads the steps'
// rows, asks Decide what to do, and writes the answer in the same
// transaction, each row change through the state machine.
//
// The rules it encodes:
//   - Only the first step is eligible at first. A later step is released
//     at its own time and only when every earlier step provably never
//     reaches the customer: still queued (then canceled in the same
//     transaction, so it can never go out later) or failed. A step that is
//     sending or unknown blocks the fallback: an ambiguous first send must
//     not become two valid prompts. Options.AcceptDuplicateRisk waives
//     that, for a caller who prefers two prompts to none.
//   - A step the provider accepted (sent) ends the challenge: a slow email
//     is not a failure. Options.FallbackUndelivered lets a sent step
//     without delivered evidence fall back at the next step's time; that
//     can produce two prompts, and the docs say so.
//   - A delivered or read step completes the challenge; every step that
//     has not gone out is canceled.
//   - Nothing is released at or after the deadline; what is still queued
//     then is canceled.
package challenge

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// Step is one step as the store read it.
type Step struct {
	State  state.State
	Reason state.Reason // the failure reason when State is failed
	// At is when the step may be released: the challenge's start for the
	// first step, its fallback time for the others.
	At time.Time
	// Released says the step was made eligible for drain. The first step
	// is released when the challenge is enqueued.
	Released bool
}

// Options are a challenge's own choices.
type Options struct {
	Deadline time.Time // zero: none
	// AcceptDuplicateRisk releases a fallback past an earlier step that is
	// sending or unknown.
	AcceptDuplicateRisk bool
	// FallbackUndelivered releases a fallback past a sent step that has no
	// delivered evidence by the fallback's time.
	FallbackUndelivered bool
}

// Outcome is where a challenge stands.
type Outcome string

// The outcomes.
const (
	Open      Outcome = "open"      // a step may still go out or be released
	Completed Outcome = "completed" // a step was delivered, read or (by default) accepted
	Expired   Outcome = "expired"   // the deadline passed with no step completed
	Failed    Outcome = "failed"    // every step failed
)

// Cancel is a step to cancel (it is queued: it has not gone out) and why;
// Why goes into the step's history.
type Cancel struct {
	Step int
	Why  string
}

// Decision is what Decide asks the store to write.
type Decision struct {
	Outcome Outcome
	// By is the step that completed the challenge (-1 otherwise).
	By int
	// Release is the step to make eligible now (-1: none). The store
	// cancels Cancel in the same transaction.
	Release int
	Cancel  []Cancel
	// Blocked is the earlier step whose uncertain state (sending or
	// unknown) holds the release back (-1: none); Why says so.
	Blocked int
	Why     string
	// Next is when to decide again without new evidence: the next step's
	// time or the deadline, whichever comes first (zero: nothing is
	// scheduled; evidence or an operator moves the challenge on).
	Next time.Time
}

// gone says a step's row provably never reaches the customer.
func gone(s Step) bool { return s.State == state.Failed }

// reached says a step's row reached the customer's device.
func reached(s Step) bool { return s.State == state.Delivered || s.State == state.Read }

// Decide applies the rules to steps (in order) at now.
func Decide(steps []Step, now time.Time, o Options) Decision {
	d := Decision{Outcome: Open, By: -1, Release: -1, Blocked: -1}
	cancelQueued := func(why string) {
		for i, s := range steps {
			if s.State == state.Queued {
				d.Cancel = append(d.Cancel, Cancel{Step: i, Why: why})
			}
		}
	}
	for i, s := range steps {
		if reached(s) {
			d.Outcome, d.By = Completed, i
			cancelQueued(fmt.Sprintf("challenge completed: step %d was %s", i+1, s.State))
			return d
		}
	}
	// The last released step, and whether every step is done for. A step
	// no longer queued though never released (a drain took it when it came
	// due) is out as surely as a released one.
	last := -1
	allGone := len(steps) > 0
	for i, s := range steps {
		if s.Released || (s.State != state.Queued && !gone(s)) {
			last = i
		}
		if !gone(s) {
			allGone = false
		}
	}
	sent := -1
	for i := 0; i <= last; i++ {
		if steps[i].State == state.Sent {
			sent = i
		}
	}
	if sent >= 0 && !o.FallbackUndelivered {
		d.Outcome, d.By = Completed, sent
		cancelQueued(fmt.Sprintf("challenge completed: step %d was accepted by the provider", sent+1))
		return d
	}
	if allGone {
		d.Outcome = Failed
		return d
	}
	if !o.Deadline.IsZero() && !now.Before(o.Deadline) {
		if sent >= 0 {
			d.Outcome, d.By = Completed, sent
		} else {
			d.Outcome = Expired
		}
		cancelQueued("challenge deadline passed")
		return d
	}
	next := last + 1
	// A step that failed before its release (an operator canceled it)
	// went nowhere and can never be released: the one after it is next.
	for next < len(steps) && gone(steps[next]) {
		next++
	}
	if next >= len(steps) {
		d.Next = o.Deadline
		return d
	}
	if now.Before(steps[next].At) {
		d.Next = steps[next].At
		if !o.Deadline.IsZero() && o.Deadline.Before(d.Next) {
			d.Next = o.Deadline
		}
		return d
	}
	// The next step's time has come: release it only past earlier steps
	// that provably went nowhere.
	var cancels []Cancel
	for i := 0; i < next; i++ {
		s := steps[i]
		switch {
		case gone(s):
		case s.State == state.Queued:
			cancels = append(cancels, Cancel{Step: i, Why: fmt.Sprintf("fallback to step %d: this step had not gone out", next+1)})
		case s.State == state.Sent: // only with FallbackUndelivered
		case s.State.InFlight() && o.AcceptDuplicateRisk:
		case s.State.InFlight():
			d.Blocked = i
			d.Why = fmt.Sprintf("fallback to step %d held: step %d is %s and may have reached the customer", next+1, i+1, s.State)
			d.Next = o.Deadline
			return d
		}
	}
	d.Release, d.Cancel = next, cancels
	if next+1 < len(steps) {
		d.Next = steps[next+1].At
	}
	if !o.Deadline.IsZero() && (d.Next.IsZero() || o.Deadline.Before(d.Next)) {
		d.Next = o.Deadline
	}
	return d
}
