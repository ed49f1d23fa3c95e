package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// DefaultIntakeBatch is how many intake rows one round of the admission
// reads and decides (one transaction).
const DefaultIntakeBatch = 256

// Admission takes the rows PostgreSQL's enqueue() took in (state intake,
// docs/sql-enqueue.md) to queued, or to failed as invalid with the field
// error verbatim, through Spec.Admit: the same admission as msgq send's,
// with this process's configuration. It decides only rows of identities
// the configuration defines; another host's may define the rest.
type Admission struct {
	Store store.Intaker
	// Defaults are the configuration's: Identities (every configured
	// identity, whether or not this process holds its secrets: admitting
	// sends nothing) and Region (for national numbers). A row's tenant,
	// key and identity are its own.
	Defaults Defaults
	// Now is the store's clock as this process knows it; time.Now when
	// nil.
	Now func() time.Time
	// Batch is the rows a round decides; 0: DefaultIntakeBatch.
	Batch int
	// Rounds bounds the rounds one Run makes (0: until no row is left), so
	// that a caller with other work (the drain) is not held by a backlog:
	// it runs again soon.
	Rounds int
}

// Run decides every intake row there is, a batch at a time, and says
// what it wrote.
func (a *Admission) Run(ctx context.Context) (store.IntakeResult, error) {
	var total store.IntakeResult
	if len(a.Defaults.Identities) == 0 {
		return total, nil
	}
	names := slices.Sorted(maps.Keys(a.Defaults.Identities))
	batch := a.Batch
	if batch <= 0 {
		batch = DefaultIntakeBatch
	}
	for round := 1; ctx.Err() == nil; round++ {
		rows, err := a.Store.IntakeList(ctx, names, batch)
		if err != nil || len(rows) == 0 {
			return total, err
		}
		now := a.now()
		ds := make([]store.IntakeDecision, len(rows))
		for i := range rows {
			ds[i] = a.decide(&rows[i], now)
		}
		res, err := a.Store.IntakeDecide(ctx, ds)
		total.Admitted += res.Admitted
		total.Invalid += res.Invalid
		total.Expired += res.Expired
		total.Skipped += res.Skipped
		if err != nil || len(rows) < batch || round == a.Rounds {
			return total, err
		}
	}
	return total, ctx.Err()
}

// Follow runs the admission until ctx ends: at once, whenever wake
// signals (the store's NOTIFY at an enqueue's commit; nil: none), and
// every poll (rows of a host that came back, a lost wake-up). Errors are
// reported to onErr and retried at the next turn.
func (a *Admission) Follow(ctx context.Context, wake <-chan struct{}, poll time.Duration, onErr func(error)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
		if _, err := a.Run(ctx); err != nil && ctx.Err() == nil && onErr != nil {
			onErr(err)
		}
		t.Reset(poll)
	}
}

func (a *Admission) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// decide is the admission of one intake row: its input read as a Spec
// (the tenant, key and identity the row's), admitted as msgq send admits
// one. A row whose deadline has passed is failed as expired rather than
// checked: it can never go out, and enqueue() refused a deadline already
// past when it took the row in, so the time passed in intake is why.
func (a *Admission) decide(r *store.IntakeRow, now time.Time) store.IntakeDecision {
	var s Spec
	if err := json.Unmarshal(r.Input, &s); err != nil {
		return store.IntakeDecision{ID: r.ID, Invalid: fmt.Sprintf("payload: the input enqueue() recorded cannot be read: %v", err)}
	}
	s.Key, s.Tenant, s.Identity = r.Key, r.Tenant, r.Identity
	if s.ExpiresAt != "" {
		if t, err := time.Parse(time.RFC3339, s.ExpiresAt); err == nil && !t.After(now) {
			return store.IntakeDecision{ID: r.ID, Expired: true}
		}
	}
	d := a.Defaults
	d.Tenant, d.Identity, d.Channel, d.Lane, d.Purpose, d.QuietHours = r.Tenant, r.Identity, "", "", "", ""
	p, err := s.Admit(now, d)
	if err != nil {
		// The row's last error names the field, as MQ422 would have.
		msg := oneLine(err.Error())
		if f := FieldOf(err); f != "" && !strings.HasPrefix(msg, f+": ") {
			msg = f + ": " + msg
		}
		return store.IntakeDecision{ID: r.ID, Invalid: msg}
	}
	return store.IntakeDecision{ID: r.ID, Params: &p}
}
