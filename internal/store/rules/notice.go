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

// Reread says how an ingest counts an item the store held already (its
// unique key refused the insert): heldBy is the event that wrote the row
// holding the key, writtenNow that this very ingest wrote that row. A
// row an earlier processing of the same event wrote (an event put back
// by WebhookRetry) makes the item a reread; any other, a duplicate.
func Reread(heldBy, eventID string, writtenNow bool) bool {
	return heldBy == eventID && !writtenNow
}

// CountRefused counts refused items of an ingest in res, of which rereads
// are rereads (Reread) and the rest duplicates.
func CountRefused(res *store.IngestResult, refused, rereads int) {
	res.Reread += rereads
	res.Duplicates += refused - rereads
}

// CountRefusedOne counts one refused item: a reread or a duplicate.
func CountRefusedOne(res *store.IngestResult, reread bool) {
	if reread {
		CountRefused(res, 1, 1)
	} else {
		CountRefused(res, 1, 0)
	}
}

// NoticeWriter is how a store writes a notice and what it says: each
// method is one statement in the store's dialect, inside the ingest's
// transaction and at its clock, and wraps its own errors. WriteNotice
// decides which of them run.
type NoticeWriter interface {
	// InsertNotice stores n under id, at (zero: NULL) as its at column;
	// false when its key is held already (then it wrote nothing).
	InsertNotice(id string, n *store.Notice, at time.Time) (bool, error)
	// NoticeHeldBy is the event that stored the notice holding n's key.
	NoticeHeldBy(n *store.Notice) (eventID string, err error)
	// Pause pauses identity with reason (kept paused_at if paused).
	Pause(identity, reason string) error
	// TemplateStatus records t's status for identity, noticeID its
	// notice, unless a later status is recorded: false then (no row
	// changed).
	TemplateStatus(identity string, t *TemplateStep, noticeID string) (bool, error)
	// HoldRows holds identity's queued rows of t's template (t.Marker,
	// t.HoldUntil), ReleaseRows makes those t.Marker held due (t.Note);
	// each returns the rows it changed.
	HoldRows(identity string, t *TemplateStep) (int, error)
	ReleaseRows(identity string, t *TemplateStep) (int, error)
}

// WriteNotice writes n (prepared: store.PrepareNotice), a notice of the
// ingest p at now (the store's clock), under id through w, and counts it
// in res. A notice whose key is held already is a reread or a duplicate
// (Reread) and writes nothing more. A new one writes what Notice decides:
// the identity's pause, then, for each identity of its template step, the
// template's status, and the hold or release of that identity's rows only
// if the status changed a row (otherwise a later status is recorded and
// this one is stale).
func WriteNotice(w NoticeWriter, id string, n *store.Notice, p *store.IngestParams, now time.Time, res *store.IngestResult) error {
	step := Notice(n, p, now)
	inserted, err := w.InsertNotice(id, n, step.At)
	if err != nil {
		return err
	}
	if !inserted {
		// A redelivery, or this event read again (WebhookRetry).
		heldBy, err := w.NoticeHeldBy(n)
		if err != nil {
			return err
		}
		CountRefusedOne(res, Reread(heldBy, p.EventID, false))
		return nil
	}
	res.Notices++
	if step.Pause {
		if err := w.Pause(n.Identity, n.PauseReason); err != nil {
			return err
		}
		res.Paused++
	}
	t := step.Template
	if t == nil {
		return nil
	}
	for _, idn := range t.Identities {
		changed, err := w.TemplateStatus(idn, t, id)
		if err != nil {
			return err
		}
		if !changed {
			continue // a later status is recorded: this one is stale
		}
		if t.Hold {
			k, err := w.HoldRows(idn, t)
			if err != nil {
				return err
			}
			res.TemplateHeld += k
			continue
		}
		k, err := w.ReleaseRows(idn, t)
		if err != nil {
			return err
		}
		res.TemplateReleased += k
	}
	return nil
}
