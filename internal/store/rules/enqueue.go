package rules

import (
	"context"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// Pending is a valid enqueue item's new row: Idx is its place in the
// batch.
type Pending struct {
	Idx int
	Msg *store.Message
}

// Key is the (tenant, key) a row is found by, as one map key.
func Key(tenant, key string) string { return tenant + "\x00" + key }

// Enqueue checks a batch at now (the store's clock) and makes the rows of
// its valid items with ids from newID. results holds each refused
// item's error; the rest are in rows, in batch order.
func Enqueue(ps []store.EnqueueParams, now time.Time, newID func(time.Time) string) (results []store.EnqueueResult, rows []Pending) {
	results = make([]store.EnqueueResult, len(ps))
	for i := range ps {
		p := ps[i]
		p.Normalize()
		p.Resolve(now)
		if err := p.Validate(now); err != nil {
			results[i].Err = err
			continue
		}
		rows = append(rows, Pending{Idx: i, Msg: store.NewMessage(&p, newID(now), now)})
	}
	return results, rows
}

// Inserted records the rows the unique index took (inserted, by id) as
// new in results, and returns them and the others: rows whose key
// exists, each a replay or a conflict (Settle).
func Inserted(results []store.EnqueueResult, rows []Pending, inserted map[string]bool) (fresh []*store.Message, others []Pending) {
	for _, r := range rows {
		if inserted[r.Msg.ID] {
			fresh = append(fresh, r.Msg)
			results[r.Idx] = store.EnqueueResult{Message: r.Msg}
		} else {
			others = append(others, r)
		}
	}
	return fresh, others
}

// Settled is what Settle decided for the rows whose key exists: how many
// were replays and conflicts (for the counters), and the revivals the
// store must write.
type Settled struct {
	Replays, Conflicts int
	Revivals           []Revival
}

// Settle decides the rows whose key exists: the same body hash is a
// replay (the existing row, written nothing), another is a conflict
// naming the existing row. A replay of a row refused for a policy
// reason whose condition has lifted (facts, read by the store for
// Candidates' rows; a row without facts is not revived) revives it
// instead, at now: the result is the row queued again, Revived. Items
// are decided in batch order, so a later item of a revived key is a
// replay of the revived row. existing is the rows found by Key. An error
// means a key the index refused was not found, a database fault.
func Settle(results []store.EnqueueResult, others []Pending, existing map[string]*store.Message, facts map[string]Facts, now time.Time) (Settled, error) {
	var out Settled
	for _, r := range others {
		k := Key(r.Msg.Tenant, r.Msg.Key)
		m := existing[k]
		switch {
		case m == nil:
			// The unique index refused the row, so it exists.
			return Settled{}, fmt.Errorf("enqueue: key %q neither inserted nor found", r.Msg.Key)
		case m.BodyHash == r.Msg.BodyHash:
			f, known := facts[m.ID]
			if v, after, ok := revive(m, r.Msg, f, known, now); ok {
				existing[k] = after
				results[r.Idx] = store.EnqueueResult{Message: after, Revived: true}
				out.Revivals = append(out.Revivals, v)
				continue
			}
			results[r.Idx] = store.EnqueueResult{Message: m, Replayed: true}
			out.Replays++
		default:
			results[r.Idx] = store.EnqueueResult{Err: &store.ConflictError{Tenant: m.Tenant, Key: m.Key, ExistingID: m.ID}}
			out.Conflicts++
		}
	}
	return out, nil
}

// One is MessageEnqueue's answer from MessageEnqueueMany's for a batch of
// one: the item's own error as the error.
func One(res []store.EnqueueResult, err error) (*store.EnqueueResult, error) {
	if err != nil {
		return nil, err
	}
	if res[0].Err != nil {
		return nil, res[0].Err
	}
	return &res[0], nil
}

// EnqueueDriver is what the enqueue use case (EnqueueMany) needs of a
// store: its statements, each one statement or one fixed round trip, with
// no decisions of their own.
type EnqueueDriver interface {
	// EnqueueClock is the store's clock, read for an enqueue.
	EnqueueClock(ctx context.Context) (time.Time, error)
	// NewID is a new message id at now.
	NewID(now time.Time) string
	// InsertFresh writes one new row with its first history entry in one
	// autocommitted round trip, and says whether it did: false (nothing
	// written) when its key exists, or when the store has no such
	// statement.
	InsertFresh(ctx context.Context, m *store.Message, now time.Time) (bool, error)
	// EnqueueTx runs fn in one transaction that will insert up to n rows
	// (a store may prepare its statements for them first).
	EnqueueTx(ctx context.Context, n int, fn func(EnqueueTx) error) error
}

// EnqueueTx is the statements of an enqueue's transaction.
type EnqueueTx interface {
	// InsertNew writes the rows whose key is free, each with its first
	// history entry (and announces them to waiting drains at commit), and
	// returns the ids it wrote.
	InsertNew(ctx context.Context, rows []Pending, now time.Time) (map[string]bool, error)
	// FindKeys is the existing rows of rows' keys, by Key.
	FindKeys(ctx context.Context, rows []Pending) (map[string]*store.Message, error)
	// LockRevivable locks ms (in id order, so that two enqueues never
	// deadlock) and reads them again with their Facts, replacing them in
	// existing: another sender may have revived one since FindKeys.
	LockRevivable(ctx context.Context, ms []*store.Message, existing map[string]*store.Message) (map[string]Facts, error)
	// Revive writes revivals (each conditional on the refusal it was
	// decided on, with its history entry) and announces them.
	Revive(ctx context.Context, vs []Revival) error
	// CountRefused adds replays and key conflicts to the running counts.
	CountRefused(ctx context.Context, now time.Time, replays, conflicts int) error
}

// EnqueueMany is the enqueue use case, written once for every store: the
// batch checked and made into rows (Enqueue); one row tried alone in one
// round trip first; else, in one transaction, the new rows written by the
// unique index and the others found and decided (a replay, a revival or a
// conflict: Settle) and counted. Each item's answer is in results, in
// batch order.
func EnqueueMany(ctx context.Context, d EnqueueDriver, ps []store.EnqueueParams) ([]store.EnqueueResult, error) {
	now, err := d.EnqueueClock(ctx)
	if err != nil {
		return nil, err
	}
	results, rows := Enqueue(ps, now, d.NewID)
	if len(rows) == 0 {
		return results, nil
	}
	if len(rows) == 1 {
		fresh, err := d.InsertFresh(ctx, rows[0].Msg, now)
		if err != nil {
			return nil, err
		}
		if fresh {
			results[rows[0].Idx] = store.EnqueueResult{Message: rows[0].Msg}
			return results, nil
		}
		// The key exists (or did while the statement ran), or the store
		// has no one-row statement: the transaction decides, as for any
		// batch.
	}
	err = d.EnqueueTx(ctx, len(rows), func(tx EnqueueTx) error {
		// A retried transaction starts over.
		for _, r := range rows {
			results[r.Idx] = store.EnqueueResult{}
		}
		inserted, err := tx.InsertNew(ctx, rows, now)
		if err != nil {
			return err
		}
		_, others := Inserted(results, rows, inserted)
		if len(others) == 0 {
			return nil
		}
		existing, err := tx.FindKeys(ctx, others)
		if err != nil {
			return err
		}
		facts, err := tx.LockRevivable(ctx, Candidates(others, existing), existing)
		if err != nil {
			return err
		}
		settled, err := Settle(results, others, existing, facts, now)
		if err != nil {
			return err
		}
		if err := tx.Revive(ctx, settled.Revivals); err != nil {
			return err
		}
		return tx.CountRefused(ctx, now, settled.Replays, settled.Conflicts)
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}
