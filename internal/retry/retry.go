// Package retry is msgq's retry table (docs/design.md, "Retry table"): it turns one classified
// provider result into what happens to the row, expressed as a state-machine
// event and, for retries, the time the row becomes eligible again.
//
// It does no I/O and holds no global state: the clock and the randomness are
// injected, so every decision is reproducible in a test.
package retry

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// Class is the retry class every provider result is classified into (docs/design.md, "Retry table").
type Class string

// The classes. Provider code tables map into exactly one of these.
const (
	Accepted    Class = "accepted"
	RateLimited Class = "rate_limited"
	Transient   Class = "transient"
	Ambiguous   Class = "ambiguous"
	Permanent   Class = "permanent"
	Identity    Class = "identity"
)

// ParseClass returns the class named s, or an error naming the valid ones.
func ParseClass(s string) (Class, error) {
	switch c := Class(s); c {
	case Accepted, RateLimited, Transient, Ambiguous, Permanent, Identity:
		return c, nil
	}
	return "", fmt.Errorf("unknown retry class %q (want one of accepted, rate_limited, transient, ambiguous, permanent, identity)", s)
}

// Policy is the schedule: data, configurable per identity.
type Policy struct {
	Base        time.Duration // first backoff ceiling, default 5s
	Factor      float64       // growth per attempt, default 2
	Cap         time.Duration // ceiling of any backoff, default 5m
	MaxAttempts int           // provider calls per row, default 8
}

// DefaultPolicy is the schedule used when an identity configures none.
func DefaultPolicy() Policy {
	return Policy{Base: 5 * time.Second, Factor: 2, Cap: 5 * time.Minute, MaxAttempts: 8}
}

// Validate reports every problem with p at once, so an operator fixing a
// config file sees them all in one run.
func (p Policy) Validate() error {
	var errs []error
	if p.Base <= 0 {
		errs = append(errs, fmt.Errorf("retry base must be greater than 0 (got %v)", p.Base))
	}
	// NaN fails every comparison, so test for the valid range, not the invalid one.
	if !(p.Factor >= 1) || math.IsInf(p.Factor, 0) {
		errs = append(errs, fmt.Errorf("retry factor must be a finite number >= 1 (got %v)", p.Factor))
	}
	if p.Cap < p.Base {
		errs = append(errs, fmt.Errorf("retry cap must be >= base (got cap %v, base %v)", p.Cap, p.Base))
	}
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("retry max_attempts must be >= 1 (got %d)", p.MaxAttempts))
	}
	return errors.Join(errs...)
}

// Ceiling is min(Cap, Base*Factor^(attempt-1)); an attempt below 1 counts as 1.
// The growth is computed in float64 so a huge attempt number saturates at
// Cap (Pow gives +Inf) instead of wrapping around to a tiny or negative delay.
func (p Policy) Ceiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	c := float64(p.Base) * math.Pow(p.Factor, float64(attempt-1))
	if !(c < float64(p.Cap)) { // also catches NaN and +Inf
		return p.Cap
	}
	if c < 0 {
		return 0
	}
	return time.Duration(c)
}

// Backoff is full jitter: uniform in [0, Ceiling(attempt)] for r in [0,1).
// Full jitter (rather than ceiling plus a little noise) spreads a burst of
// rows that failed together, so they do not all come back at the same moment.
// r outside [0,1) is clamped rather than trusted.
func (p Policy) Backoff(attempt int, r float64) time.Duration {
	ceil := p.Ceiling(attempt)
	if !(r > 0) { // also catches NaN
		return 0
	}
	d := float64(ceil) * r
	// Rounding can lift d to float64(ceil), which may not fit back in an int64.
	if d >= float64(ceil) {
		return ceil
	}
	return time.Duration(d)
}

// Widen is the pacing helper for the drain: after a rate_limited answer it
// returns the wider spacing to keep between sends to that recipient or
// identity (docs/design.md, "Retry table"). It grows by Factor up to Cap and never narrows a
// spacing already above Cap; a row that was not paced at all starts at Base.
func (p Policy) Widen(interval time.Duration) time.Duration {
	if interval <= 0 {
		return p.Base
	}
	if interval >= p.Cap {
		return interval
	}
	w := float64(interval) * p.Factor
	if !(w < float64(p.Cap)) {
		return p.Cap
	}
	return max(time.Duration(w), interval)
}

// ParseRetryAfter reads an HTTP Retry-After header: delta-seconds or an HTTP
// date (the http.ParseTime formats), relative to now. It returns (0,false)
// for an empty, malformed or negative value, and (0,true) for a date already
// past. A number of seconds too large for a Duration saturates rather than
// wrapping into a short delay.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		var secs int64
		for _, c := range v {
			secs = secs*10 + int64(c-'0')
			if secs > maxSeconds {
				return time.Duration(math.MaxInt64), true
			}
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// isDigits is the RFC 9110 delay-seconds grammar (1*DIGIT): no sign, no
// fraction, so "-5" and "1.5" are rejected rather than guessed at.
func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Outcome is one classified provider result.
type Outcome struct {
	Class      Class
	RetryAfter time.Duration // the provider's stated delay, 0 if none
	Idempotent bool          // the provider deduplicates by our key (a retry with the same key cannot duplicate)
}

// Action is what to do with the row.
type Action string

// The actions.
const (
	MarkSent      Action = "sent"
	Requeue       Action = "requeue"
	MarkUnknown   Action = "unknown"
	MarkFailed    Action = "failed"
	PauseIdentity Action = "pause_identity"
)

// Decision is what to do with the row after one provider call.
type Decision struct {
	Action Action
	At     time.Time    // Requeue / PauseIdentity: when the row becomes eligible again
	Reason state.Reason // MarkFailed: state.Permanent, state.Expired or state.Exhausted
}

// Event returns the state-machine event for d. PauseIdentity maps to Retry:
// the row goes back to queued and the drain pauses the identity. An unknown
// action gives the zero Event, which state.Transition refuses, so a bad
// decision fails loudly instead of moving the row somewhere plausible.
func (d Decision) Event() state.Event {
	switch d.Action {
	case MarkSent:
		return state.Event{Kind: state.Accept}
	case Requeue, PauseIdentity:
		return state.Event{Kind: state.Retry}
	case MarkUnknown:
		return state.Event{Kind: state.Ambiguous}
	case MarkFailed:
		return state.Event{Kind: state.Fail, Reason: d.Reason}
	}
	return state.Event{}
}

// Table decides. Policy must be valid, and Now and Rand must be set: they
// are the only clock and randomness the decision uses.
type Table struct {
	Policy Policy
	Now    func() time.Time
	Rand   func() float64 // in [0,1)
}

// Decide maps one provider outcome to a decision. attempts is the number of
// provider calls made for the row including this one; a zero expiresAt
// means no deadline.
func (t Table) Decide(o Outcome, attempts int, expiresAt time.Time) Decision {
	now := t.Now()
	switch o.Class {
	case Accepted:
		// It went out: the deadline no longer matters.
		return Decision{Action: MarkSent}

	case Permanent:
		return failed(state.Permanent)

	case Transient:
		return t.retry(now, attempts, 0, expiresAt)

	case RateLimited:
		return t.retry(now, attempts, o.RetryAfter, expiresAt)

	case Identity:
		// The identity (token, account, payment) is what is broken, not the
		// row, so the row goes back to queued without checking MaxAttempts:
		// failing every queued row as exhausted because a token expired would
		// turn one operator fix into a mass resend. The deadline still holds,
		// but only as of now: the pause may be lifted sooner than RetryAfter,
		// and the claim refuses the row once its deadline passes anyway.
		if !expiresAt.IsZero() && now.After(expiresAt) {
			return failed(state.Expired)
		}
		return Decision{Action: PauseIdentity, At: now.Add(max(o.RetryAfter, 0))}
	}

	// Ambiguous, and any class we do not know. An unknown class is treated as
	// ambiguous because that is the one reading that can never send twice:
	// without a dedupe key the row waits in unknown for evidence or a person.
	// No deadline applies to unknown either: the message may already be on the
	// phone, so "expired" would be a claim we cannot make.
	if o.Idempotent {
		return t.retry(now, attempts, 0, expiresAt)
	}
	return Decision{Action: MarkUnknown}
}

// retry schedules the next attempt at max(stated, backoff) from now, unless
// attempts or the deadline have run out.
func (t Table) retry(now time.Time, attempts int, stated time.Duration, expiresAt time.Time) Decision {
	if attempts >= t.Policy.MaxAttempts {
		return failed(state.Exhausted)
	}
	at := now.Add(max(stated, t.Policy.Backoff(attempts, t.Rand())))
	// Landing exactly on the deadline is still in time; only after it is not.
	if !expiresAt.IsZero() && at.After(expiresAt) {
		return failed(state.Expired)
	}
	return Decision{Action: Requeue, At: at}
}

func failed(r state.Reason) Decision { return Decision{Action: MarkFailed, Reason: r} }
