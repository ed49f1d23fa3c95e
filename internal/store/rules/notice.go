package rules

import (
	"time"

	"github.com/msgq/msgq/internal/store"
)

// NoticeStep is what a notice new to the store writes besides its own
// row, as Notice decides it.
type NoticeStep struct {
	// At is the notice's at column: the provider's time at the store's
	// resolution, zero when it gave none.
	At time.Time
	// Pause says to pause the notice's identity with its PauseReason.
	Pause bool
	// Template, when set, is the hold or release of a template's queued
	// rows the notice says.
	Template *TemplateStep
}

// TemplateStep is a template status that holds or releases rows: for
// each of Identities, the status is recorded (unless a later one is:
// then that identity's rows are left as they are), and then the
// identity's queued rows of the template are held or released.
type TemplateStep struct {
	Identities             []string
	Template, Lang, Status string
	// Since is the status's time: the provider's, else the ingest's.
	Since time.Time
	// Hold: the queued rows of Template (of Lang, or any language when
	// Lang is "") get Marker as last_error and wait until HoldUntil at the
	// least. Otherwise the status releases the rows Marker held: due at
	// the ingest's time, with Note as last_error.
	Hold      bool
	Marker    string
	HoldUntil time.Time
	Note      string
}

// Notice decides what n, a notice of the ingest p (prepared:
// store.PrepareNotice), writes at now (the store's clock) once the store
// has found it new: a redelivery writes nothing beyond the count.
func Notice(n *store.Notice, p *store.IngestParams, now time.Time) NoticeStep {
	var s NoticeStep
	if !n.At.IsZero() {
		s.At = n.At.UTC().Truncate(store.Resolution)
	}
	s.Pause = n.PauseReason != "" && n.Identity != ""
	if n.Kind != store.NoticeTemplate {
		return s
	}
	hold, release := store.HoldsTemplate(n.Value)
	if !hold && !release {
		return s
	}
	t := &TemplateStep{Identities: p.TemplateIdentitiesOf(n.Identity), Template: n.Subject, Lang: n.Lang, Status: n.Value,
		Since: now, Hold: hold, Marker: store.TemplateHeldError(n.Subject, n.Lang)}
	if !s.At.IsZero() {
		t.Since = s.At
	}
	if hold {
		t.HoldUntil = now.Add(store.TemplateHoldFor)
	} else {
		t.Note = store.TemplateReleasedNote(n.Subject, n.Lang, n.Value)
	}
	s.Template = t
	return s
}
