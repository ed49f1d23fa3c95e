package rules

import (
	"context"
	"errors"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// TickDriver is what the challenge tick use case (ChallengeTickDue) needs
// of a store.
type TickDriver interface {
	// TickClock is the time the due challenges are found at: at when it
	// is set (tests, a caller's own clock), else the store's clock.
	TickClock(ctx context.Context, at time.Time) (time.Time, error)
	// ChallengesDue are up to limit open challenges whose next decision is
	// due at now, or one of whose steps' messages changed state since the
	// last tick, soonest first.
	ChallengesDue(ctx context.Context, now time.Time, limit int) ([]string, error)
	// TickTx runs fn in one transaction.
	TickTx(ctx context.Context, fn func(TickTx) error) error
}

// TickTx is the statements of one challenge's tick, each one statement
// with no decision of its own.
type TickTx interface {
	// Now is the time this tick decides at, as TickClock, read in the
	// transaction (under its lock).
	Now(ctx context.Context, at time.Time) (time.Time, error)
	// ChallengeOpen reads the open challenge id with its steps, locked
	// for this transaction (nil: not open, or another tick holds it).
	ChallengeOpen(ctx context.Context, id string) (*store.Challenge, error)
	// StepCancel cancels a queued step's message (with its history, from
	// source), and says whether it was still queued.
	StepCancel(ctx context.Context, x StepCancel, source string, now time.Time) (bool, error)
	// StepRelease makes a queued step's message due now and marks the
	// step released (announcing it to waiting drains at commit), and says
	// whether the message was still queued.
	StepRelease(ctx context.Context, challengeID string, step int, messageID string, now time.Time) (bool, error)
	// StepWhy sets why a step is as it is.
	StepWhy(ctx context.Context, challengeID string, step int, why string) error
	// StepsSeen records each step's message state as the tick saw it.
	StepsSeen(ctx context.Context, challengeID string) error
	// ChallengeUpdate writes the plan's outcome, blocking step, why and
	// next decision time.
	ChallengeUpdate(ctx context.Context, id string, plan TickPlan, now time.Time) error
}

// errMoved undoes a tick: a step's message moved on since the challenge
// was read (a drain claimed it), so the plan is decided again next time.
var errMoved = errors.New("a step moved since the challenge was read")

// ChallengeTickDue is the challenge tick use case, written once for every
// store (docs/challenges.md): each due challenge decided (ChallengeTick)
// and its plan applied in a transaction of its own: cancels, the release
// of the next step, why each step is as it is, the states seen, the
// outcome. A plan whose cancel or release finds its message moved on is
// undone whole, to be decided again. It returns how many were applied.
func ChallengeTickDue(ctx context.Context, d TickDriver, p *store.TickParams) (int, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	now, err := d.TickClock(ctx, p.Now)
	if err != nil {
		return 0, err
	}
	ids, err := d.ChallengesDue(ctx, now, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		done := false
		err := d.TickTx(ctx, func(tx TickTx) error {
			c, err := tx.ChallengeOpen(ctx, id)
			if err != nil || c == nil {
				return err
			}
			now, err := tx.Now(ctx, p.Now)
			if err != nil {
				return err
			}
			plan := ChallengeTick(c, now)
			for _, x := range plan.Cancels {
				ok, err := tx.StepCancel(ctx, x, p.Source, now)
				if err != nil {
					return err
				}
				if !ok {
					return errMoved
				}
			}
			if plan.Release > 0 {
				st := c.Steps[plan.Release-1]
				ok, err := tx.StepRelease(ctx, c.ID, st.Step, st.Message.ID, now)
				if err != nil {
					return err
				}
				if !ok {
					return errMoved
				}
			}
			for step, why := range plan.StepWhy {
				if err := tx.StepWhy(ctx, c.ID, step, why); err != nil {
					return err
				}
			}
			if err := tx.StepsSeen(ctx, c.ID); err != nil {
				return err
			}
			if err := tx.ChallengeUpdate(ctx, c.ID, plan, now); err != nil {
				return err
			}
			done = true
			return nil
		})
		switch {
		case errors.Is(err, errMoved):
		case err != nil:
			return n, err
		case done:
			n++
		}
	}
	return n, nil
}
