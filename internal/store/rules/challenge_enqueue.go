package rules

import (
	"context"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// ChallengeDriver is what the challenge enqueue use case
// (ChallengeEnqueue) needs of a store: its clock, ids, and a transaction
// of its statements.
type ChallengeDriver interface {
	EnqueueClock(ctx context.Context) (time.Time, error)
	NewID(now time.Time) string
	ChallengeTx(ctx context.Context, fn func(ChallengeTx) error) error
}

// ChallengeTx is the statements of a challenge enqueue's transaction,
// each one statement with no decision of its own.
type ChallengeTx interface {
	// ChallengeInsert writes c unless its (tenant, key) is taken, and
	// says whether it did.
	ChallengeInsert(ctx context.Context, c *store.Challenge, now time.Time) (bool, error)
	// ChallengeByKey reads a challenge with its steps (nil: none), locking
	// it when lock.
	ChallengeByKey(ctx context.Context, tenant, key string, lock bool) (*store.Challenge, error)
	// StepCancel cancels a queued step's message (with its history), and
	// says whether it was still queued.
	StepCancel(ctx context.Context, x StepCancel, now time.Time) (bool, error)
	// StepWhy sets why a step of a challenge is as it is.
	StepWhy(ctx context.Context, challengeID string, step int, why string) error
	// ChallengeSupersede ends an open challenge as superseded.
	ChallengeSupersede(ctx context.Context, id, why string, now time.Time) error
	// MessageInsertOne writes a step's message unless its key is taken,
	// and says whether it did; MessageIDByKey is the row that holds a key.
	MessageInsertOne(ctx context.Context, m *store.Message, now time.Time) (bool, error)
	MessageIDByKey(ctx context.Context, tenant, key string) (string, error)
	// StepInsert writes a step of challenge id, sending m.
	StepInsert(ctx context.Context, id string, st store.ChallengeStep, m *store.Message) error
	// CreationHistory writes the new messages' first history entries and
	// announces them to waiting drains at commit.
	CreationHistory(ctx context.Context, ms []*store.Message, now time.Time) error
	// CountRefused adds replays and key conflicts to the running counts.
	CountRefused(ctx context.Context, now time.Time, replays, conflicts int) error
}

// ChallengeEnqueue is the challenge enqueue use case, written once for
// every store (docs/challenges.md): the challenge and its steps' messages
// built (ChallengeBuild); in one transaction the challenge written by its
// key's unique index, or else found: the same body is a replay, another a
// conflict (counted either way, and the count committed); a superseded
// challenge's steps that have not gone out canceled and the challenge
// ended; then each step's message (a key a single send holds is a
// conflict, and nothing is written) and its step row, and the messages'
// first history entries.
func ChallengeEnqueue(ctx context.Context, d ChallengeDriver, p *store.ChallengeParams) (*store.ChallengeResult, error) {
	now, err := d.EnqueueClock(ctx)
	if err != nil {
		return nil, err
	}
	c, msgs, err := ChallengeBuild(p, now, d.NewID)
	if err != nil {
		return nil, err
	}
	var res *store.ChallengeResult
	var refused error
	err = d.ChallengeTx(ctx, func(tx ChallengeTx) error {
		res, refused = &store.ChallengeResult{Challenge: c}, nil
		inserted, err := tx.ChallengeInsert(ctx, c, now)
		if err != nil {
			return err
		}
		if !inserted {
			old, err := tx.ChallengeByKey(ctx, c.Tenant, c.Key, false)
			if err != nil {
				return err
			}
			if old == nil {
				return fmt.Errorf("challenge enqueue: key %q neither inserted nor found", c.Key)
			}
			replay := old.BodyHash == c.BodyHash
			if replay {
				res = &store.ChallengeResult{Challenge: old, Replayed: true}
			} else {
				refused = &store.ConflictError{Tenant: old.Tenant, Key: old.Key, ExistingID: old.ID}
			}
			n := map[bool]int{true: 1}
			return tx.CountRefused(ctx, now, n[replay], n[!replay])
		}
		if c.Supersedes != "" {
			sup, err := tx.ChallengeByKey(ctx, c.Tenant, c.Supersedes, true)
			if err != nil {
				return err
			}
			if sup == nil {
				return &store.InvalidError{Field: "supersedes", Msg: fmt.Sprintf("no challenge has key %q", c.Supersedes)}
			}
			for _, x := range Supersede(sup, c.Key) {
				ok, err := tx.StepCancel(ctx, x, now)
				if err != nil {
					return err
				}
				if ok {
					res.Superseded++
					if err := tx.StepWhy(ctx, sup.ID, x.Step, "canceled: "+x.Detail); err != nil {
						return err
					}
				}
			}
			if err := tx.ChallengeSupersede(ctx, sup.ID, "superseded by challenge "+c.Key, now); err != nil {
				return err
			}
		}
		for i, m := range msgs {
			ok, err := tx.MessageInsertOne(ctx, m, now)
			if err != nil {
				return err
			}
			if !ok {
				// A single send holds the key: the challenge is another body.
				existing, err := tx.MessageIDByKey(ctx, m.Tenant, m.Key)
				if err != nil {
					return err
				}
				return &store.ConflictError{Tenant: m.Tenant, Key: m.Key, ExistingID: existing}
			}
			if err := tx.StepInsert(ctx, c.ID, c.Steps[i], m); err != nil {
				return err
			}
		}
		return tx.CreationHistory(ctx, msgs, now)
	})
	if err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	return res, nil
}
