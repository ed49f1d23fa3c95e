package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/msgq/msgq/internal/storeopen"
)

// storeRetryFor bounds how long send keeps trying a store it cannot reach:
// long enough to ride out a database restart or failover, short enough
// that a script calling send is not held up for long by a database that
// is really gone.
const storeRetryFor = 10 * time.Second

// retryLostConnection runs op (open the store and write) until it
// succeeds, fails in a way that is not a lost connection, ctx ends, or
// storeRetryFor has passed. Retrying a send is safe: its key makes a
// second write of a row that the first attempt did commit (its answer
// lost with the connection) a replay of that row, never a second row.
func (a *app) retryLostConnection(ctx context.Context, op func() error) error {
	start := time.Now()
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || ctx.Err() != nil || !storeopen.ConnectionLost(err) {
			return err
		}
		// Full jitter: many senders that lost one database together do not
		// come back in step.
		pause := time.Duration(rand.Int64N(int64(wait))) + wait/2
		if time.Since(start)+pause > storeRetryFor {
			return fmt.Errorf("%w (gave up after %d attempts in %.1fs)", err, attempt, time.Since(start).Seconds())
		}
		a.log.Warn("store unreachable; retrying", "attempt", attempt, "err", storeopen.RedactErr(a.cfg.Store, err).Error(), "in", pause.Round(time.Millisecond))
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		wait = min(wait*2, 2*time.Second)
	}
}
