package cli

import (
	"time"

	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/quiet"
	"github.com/msgq/msgq/internal/store"
)

// quietSchedule applies quiet hours at enqueue: a send that would be due
// inside its recipient's quiet window is scheduled for the window's end,
// so that no drain claims it meanwhile. override is the send's own
// setting ("" for its identity's, quiet.Off, or a window); it is kept
// with the row, for the drain's last check before the call and for
// retries. The time is this host's clock: the drain checks again on the
// store's clock as it knows it, so a small offset cannot send a row in
// the window. A send whose deadline comes before the window ends could
// never go out: it is refused, naming the way out. The decision is
// quiet.Policy.Schedule's, which PostgreSQL's enqueue() is tested against
// (internal/store/postgres/sqlenqueue_quiet_test.go).
func quietSchedule(p *store.EnqueueParams, override string, id *identities.Identity, now time.Time) error {
	var pol quiet.Policy
	if id != nil {
		pol = id.Quiet
	}
	row := quiet.Row{To: p.To, Channel: p.Channel, Lane: p.Lane, Purpose: p.Purpose, Override: override}
	// Schedule checks the override first (quiet.CheckOverride).
	until, held, err := pol.Schedule(row, now, p.NotBefore, p.NotBeforeIn, p.ExpiresAt, p.ExpiresIn)
	if err != nil {
		return &store.InvalidError{Field: "quiet_hours", Msg: err.Error()}
	}
	p.Payload.QuietHours = override
	if held {
		p.NotBefore, p.NotBeforeIn = until, 0
	}
	return nil
}
