package cli

import (
	"fmt"
	"time"

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
// never go out: it is refused, naming the way out.
func quietSchedule(p *store.EnqueueParams, override string, id *identity, now time.Time) error {
	if err := quiet.CheckOverride(override); err != nil {
		return &store.InvalidError{Field: "quiet_hours", Msg: err.Error()}
	}
	p.Payload.QuietHours = override
	var pol quiet.Policy
	if id != nil {
		pol = id.Quiet
	}
	row := quiet.Row{To: p.To, Channel: p.Channel, Lane: p.Lane, Purpose: p.Purpose, Override: override}
	if err := pol.Check(row); err != nil {
		return &store.InvalidError{Field: "quiet_hours", Msg: fmt.Sprintf("%s: %v", override, err)}
	}
	due := now
	switch {
	case p.NotBeforeIn > 0:
		due = now.Add(p.NotBeforeIn)
	case !p.NotBefore.IsZero() && p.NotBefore.After(now):
		due = p.NotBefore
	}
	h, ok := pol.At(due, row)
	if !ok {
		return nil
	}
	deadline := p.ExpiresAt
	if p.ExpiresIn > 0 {
		deadline = now.Add(p.ExpiresIn)
	}
	if !deadline.IsZero() && !deadline.After(h.Until) {
		return &store.InvalidError{Field: "quiet_hours", Msg: fmt.Sprintf("the message expires at %s, inside the recipient's %s: it could never go out (send it with quiet_hours off, or exempt its lane or purpose)",
			deadline.UTC().Format(time.RFC3339), h)}
	}
	p.NotBefore, p.NotBeforeIn = h.Until, 0
	return nil
}
