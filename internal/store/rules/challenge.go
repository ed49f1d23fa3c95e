package rules

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/challenge"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// MaxChallengeSteps bounds a challenge's steps: a verification has an
// email and an SMS, perhaps a voice call; more is a mistake.
const MaxChallengeSteps = 5

// ChallengeBuild checks p at now (the store's clock) and makes the
// challenge's row and its steps' rows (ids from newID): each step is a
// queued row whose key is store.StepKey, due at its release time, expiring
// at the challenge's deadline. Only step 1 is released. Errors are
// *store.InvalidError naming the field.
func ChallengeBuild(p *store.ChallengeParams, now time.Time, newID func(time.Time) string) (*store.Challenge, []*store.Message, error) {
	q := *p
	if q.Tenant == "" {
		q.Tenant = store.DefaultTenant
	}
	switch {
	case !store.ValidKey(q.Tenant):
		return nil, nil, &store.InvalidError{Field: "tenant", Msg: "must be 1 to 64 characters of A-Za-z0-9._:-"}
	case !store.ValidKey(q.Key):
		return nil, nil, &store.InvalidError{Field: "key", Msg: fmt.Sprintf("must be 1 to 64 characters of A-Za-z0-9._:- (got %q)", q.Key)}
	case len(q.Steps) < 2 || len(q.Steps) > MaxChallengeSteps:
		return nil, nil, &store.InvalidError{Field: "steps", Msg: fmt.Sprintf("a challenge has 2 to %d steps (got %d)", MaxChallengeSteps, len(q.Steps))}
	case q.Supersedes != "" && (!store.ValidKey(q.Supersedes) || q.Supersedes == q.Key):
		return nil, nil, &store.InvalidError{Field: "supersedes", Msg: fmt.Sprintf("must be another challenge's key (got %q)", q.Supersedes)}
	case q.ExpiresIn < 0:
		return nil, nil, &store.InvalidError{Field: "expires_in", Msg: "must not be negative"}
	}
	var deadline time.Time
	switch {
	case q.ExpiresIn > 0:
		deadline = now.Add(q.ExpiresIn).UTC().Truncate(store.Resolution)
	case !q.ExpiresAt.IsZero():
		deadline = q.ExpiresAt.UTC().Truncate(store.Resolution)
		if !deadline.After(now) {
			return nil, nil, &store.InvalidError{Field: "expires_at", Msg: "has passed"}
		}
	}
	steps := make([]store.ChallengeStepParams, len(q.Steps))
	copy(steps, q.Steps)
	q.Steps = steps
	msgs := make([]*store.Message, len(steps))
	release := make([]time.Time, len(steps))
	prev := time.Duration(0)
	for i := range steps {
		field := fmt.Sprintf("steps[%d]", i+1)
		st := &steps[i]
		switch {
		case i == 0 && st.After != 0:
			return nil, nil, &store.InvalidError{Field: field + ".after", Msg: "the first step goes out at once"}
		case i > 0 && st.After <= prev:
			return nil, nil, &store.InvalidError{Field: field + ".after", Msg: "must be later than the step before's"}
		case !deadline.IsZero() && !now.Add(st.After).Before(deadline):
			return nil, nil, &store.InvalidError{Field: field + ".after", Msg: "must be before the deadline"}
		}
		prev = st.After
		ep := st.EnqueueParams
		ep.Tenant, ep.Key = q.Tenant, q.Key
		ep.NotBefore, ep.NotBeforeIn, ep.ExpiresIn = time.Time{}, 0, 0
		ep.ExpiresAt = deadline
		ep.ResendOf = ""
		ep.Normalize()
		if err := ep.Validate(now); err != nil {
			var ie *store.InvalidError
			if e, ok := err.(*store.InvalidError); ok {
				ie = &store.InvalidError{Field: field + "." + e.Field, Msg: e.Msg}
				return nil, nil, ie
			}
			return nil, nil, err
		}
		ep.NotBefore = now.Add(st.After)
		st.EnqueueParams = ep
		m := store.NewMessage(&ep, newID(now), now)
		m.Key = store.StepKey(q.Key, i+1)
		msgs[i] = m
		release[i] = m.NextAttemptAt
		if i > 0 {
			m.NextAttemptAt = store.HeldUntil
		}
	}
	c := &store.Challenge{
		ID: newID(now), Tenant: q.Tenant, Key: q.Key, BodyHash: q.BodyHash(),
		AcceptDuplicateRisk: q.AcceptDuplicateRisk, FallbackUndelivered: q.FallbackUndelivered,
		Supersedes: q.Supersedes, Outcome: string(challenge.Open), Why: "step 1 released",
		CreatedAt: now, UpdatedAt: now,
	}
	if !deadline.IsZero() {
		c.Deadline = &deadline
	}
	next := release[1]
	c.NextAt = &next
	for i, m := range msgs {
		s := store.ChallengeStep{Step: i + 1, ReleaseAt: release[i], Released: i == 0, Message: *m}
		if i == 0 {
			s.Why = "released: the first step goes out at once"
		}
		c.Steps = append(c.Steps, s)
	}
	return c, msgs, nil
}

// ChallengeCancel is the transition a challenge writes on a step that has
// not gone out (queued), through the machine's cancel.
func ChallengeCancel() state.Result {
	res, err := state.Transition(state.Queued, state.Event{Kind: state.Cancel})
	if err != nil {
		panic(err) // the machine's own table: a queued row is canceled
	}
	return res
}

// ChallengeCancelEvent names the cancel in history.
var ChallengeCancelEvent = state.Event{Kind: state.Cancel}.String()

// StepCancel is a step a tick or a superseding enqueue cancels: its row
// (queued when read) and the history row's detail.
type StepCancel struct {
	Step   int // 1-based
	ID     string
	Detail string
}

// TickPlan is what a tick writes for one challenge, in one transaction:
// the cancels (each conditional on the row still being queued: one that
// moved on undoes the whole plan, to be decided again), the release, and
// the challenge's new outcome, reasons and next decision time.
type TickPlan struct {
	Cancels []StepCancel
	Release int // 1-based step to release (0: none)
	Outcome string
	By      int
	Blocked int
	Why     string
	NextAt  *time.Time
	// StepWhy is each step's new reason (1-based; only those that change).
	StepWhy map[int]string
}

// ChallengeTick decides c (its steps as read under the tick's lock) at now.
func ChallengeTick(c *store.Challenge, now time.Time) TickPlan {
	steps := make([]challenge.Step, len(c.Steps))
	for i, s := range c.Steps {
		steps[i] = challenge.Step{State: s.Message.State, Reason: s.Message.Reason, At: s.ReleaseAt, Released: s.Released}
	}
	o := challenge.Options{AcceptDuplicateRisk: c.AcceptDuplicateRisk, FallbackUndelivered: c.FallbackUndelivered}
	if c.Deadline != nil {
		o.Deadline = *c.Deadline
	}
	d := challenge.Decide(steps, now, o)
	p := TickPlan{Outcome: string(d.Outcome), By: d.By + 1, Blocked: d.Blocked + 1, Release: d.Release + 1, StepWhy: map[int]string{}}
	for _, x := range d.Cancel {
		s := c.Steps[x.Step]
		if s.Message.State != state.Queued {
			continue
		}
		p.Cancels = append(p.Cancels, StepCancel{Step: x.Step + 1, ID: s.Message.ID, Detail: x.Why})
		p.StepWhy[x.Step+1] = "canceled: " + x.Why
	}
	switch {
	case d.Release >= 0:
		why := fmt.Sprintf("released at its time: no earlier step reached the customer")
		for i := 0; i < d.Release; i++ {
			if steps[i].State.InFlight() || steps[i].State == state.Sent {
				why = fmt.Sprintf("released at its time: step %d is %s, and the challenge accepts the duplicate risk", i+1, steps[i].State)
				if steps[i].State == state.Sent {
					why = fmt.Sprintf("released at its time: step %d was sent without delivered evidence (fallback when undelivered)", i+1)
				}
			}
		}
		p.StepWhy[d.Release+1] = why
		p.Why = fmt.Sprintf("step %d released", d.Release+1)
	case d.Blocked >= 0:
		p.Why = d.Why
		for i := range c.Steps {
			if !c.Steps[i].Released && c.Steps[i].Message.State == state.Queued {
				p.StepWhy[i+1] = "held: " + d.Why
				break
			}
		}
	case d.Outcome == challenge.Completed:
		p.Why = fmt.Sprintf("completed by step %d (%s)", d.By+1, c.Steps[d.By].Message.State)
	case d.Outcome == challenge.Expired:
		p.Why = "the deadline passed with no step completed"
	case d.Outcome == challenge.Failed:
		p.Why = "every step failed"
	default:
		p.Why = c.Why
	}
	if !d.Next.IsZero() {
		n := d.Next.UTC().Truncate(store.Resolution)
		p.NextAt = &n
	}
	return p
}

// Supersede lists the steps of old (a challenge a new enqueue supersedes)
// that have not gone out, for the enqueue to cancel in its transaction.
func Supersede(old *store.Challenge, by string) []StepCancel {
	var out []StepCancel
	for _, s := range old.Steps {
		if s.Message.State == state.Queued {
			out = append(out, StepCancel{Step: s.Step, ID: s.Message.ID, Detail: "superseded by challenge " + by})
		}
	}
	return out
}
