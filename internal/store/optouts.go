package store

import (
	"context"
	"time"
)

// OptOut is one recipient's standing with one identity.
type OptOut struct {
	Identity   string    `json:"identity"`
	Recipient  string    `json:"recipient"`
	OptedOut   bool      `json:"opted_out"`
	Source     string    `json:"source"`
	ChangedAt  time.Time `json:"changed_at"`
	RecordedAt time.Time `json:"recorded_at"`
}

// OptOutParams records that a recipient opted out of an identity, or in
// again.
type OptOutParams struct {
	Identity  string
	Recipient string // normalised (internal/recipient)
	OptedOut  bool
	// Source says what said so, for the operator: "inbound STOP",
	// "twilio 21610", "operator".
	Source string
	// At is when the evidence says the change happened (the inbound
	// message's or the provider answer's time). A change older than the
	// one recorded is ignored, so out-of-order evidence cannot undo a
	// newer STOP or START. Zero: now.
	At time.Time
}

// Validate checks the parameters.
func (p *OptOutParams) Validate() error {
	switch {
	case p.Identity == "":
		return &InvalidError{Field: "identity", Msg: "is required"}
	case p.Recipient == "":
		return &InvalidError{Field: "recipient", Msg: "is required"}
	case p.Source == "":
		return &InvalidError{Field: "source", Msg: "is required"}
	}
	return nil
}

// OptOuts is what a store keeps of opt-outs. Recording is idempotent (a
// webhook processed twice records the same change twice, harmlessly) and
// ordered by the evidence's own time.
type OptOuts interface {
	// SetOptOut records p and says whether it changed what is recorded
	// (false for a repeat or a change older than the one recorded).
	SetOptOut(ctx context.Context, p OptOutParams) (changed bool, err error)
	// OptedOut says whether recipient has opted out of identity.
	OptedOut(ctx context.Context, identity, recipient string) (bool, error)
	// ListOptOuts lists the recipients currently opted out of identity
	// (every identity when empty), newest change first, at most limit.
	ListOptOuts(ctx context.Context, identity string, limit int) ([]OptOut, error)
}

// OptOutChanged says whether a recorded change altered a recipient's
// standing: it was written, and it differs from what was there (no row
// reads as opted in).
func OptOutChanged(written, hadRow, was, now bool) bool {
	if !written {
		return false
	}
	if !hadRow {
		return now
	}
	return was != now
}
