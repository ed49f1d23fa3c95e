package rules

import (
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
