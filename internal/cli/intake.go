package cli

import (
	"context"
	"time"

	"github.com/msgq/msgq/internal/queue"
	"github.com/msgq/msgq/internal/store"
)

// intakeAdmission is the admission of the rows PostgreSQL's enqueue()
// takes in (docs/sql-enqueue.md) with this config, for a store that has
// them; nil for one that has not (SQLite).
func intakeAdmission(a *app, st store.Store, now func() time.Time) *queue.Admission {
	in, ok := st.(store.Intaker)
	if !ok {
		return nil
	}
	return &queue.Admission{Store: in, Defaults: queue.Defaults{Region: a.cfg.Region, Identities: a.cfg.Identities}, Now: now}
}

// intakePoll is how often msgq serve admits intake rows without a
// wake-up (behind a transaction pooler, which cannot LISTEN).
const intakePoll = 2 * time.Second

// followIntake admits intake rows until ctx ends, woken by the store's
// NOTIFY at each enqueue() commit where it can listen.
func followIntake(ctx context.Context, a *app, st store.Store, what string) {
	adm := intakeAdmission(a, st, a.now)
	if adm == nil {
		return
	}
	var wake <-chan struct{}
	if l, ok := st.(store.Listener); ok {
		w, err := l.Enqueued(ctx)
		if err != nil {
			// Expected behind a transaction pooler.
			a.log.Info(what+": cannot listen for enqueues; admitting rows taken in by SQL every "+intakePoll.String(), "why", err)
		}
		wake = w
	}
	adm.Follow(ctx, wake, intakePoll, func(err error) {
		a.log.Warn(what+": admitting rows taken in by SQL failed; retrying", "err", err)
	})
}
