package rules

import (
	"sort"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// IngestEvent is one item of a WebhookIngest that the store writes.
type IngestEvent struct {
	P *store.IngestParams
	// Ev is the stored event (nil: none of that id; its content is still
	// kept, since nothing a provider said is dropped, but there is no event
	// to mark).
	Ev *store.IngestedEvent
	// Received is when msgq received the event: the stored event's time,
	// else the ingest's.
	Received time.Time
	// Write says to write the event's statuses, notices and inbound
	// messages; an event processing could not read (P.Err) is only marked.
	Write bool
	// Mark is the error to mark Ev processed with: P.Err, else the items
	// it had to skip (P.Skipped), else "".
	Mark string
}

// Ingest decides which items of ps an ingest at now (the store's clock)
// writes, given the stored events by id as read under the ingest's lock:
// an event processed already, or earlier in ps, writes nothing again
// (running ingest twice writes nothing twice). It prepares the statuses
// and inbound messages of the events it writes in place
// (store.PrepareStatus, store.PrepareInbound, their received times at the
// store's resolution); the store sets ids and the times it keeps.
func Ingest(ps []store.IngestParams, events map[string]*store.IngestedEvent, now time.Time) []IngestEvent {
	var out []IngestEvent
	taken := map[string]bool{}
	for i := range ps {
		p := &ps[i]
		ev := events[p.EventID]
		if ev != nil && (ev.Processed || taken[p.EventID]) {
			continue
		}
		taken[p.EventID] = true
		e := IngestEvent{P: p, Ev: ev, Received: now, Write: p.Err == "", Mark: p.Err}
		if ev != nil {
			e.Received = ev.ReceivedAt
		}
		if e.Mark == "" {
			e.Mark = p.Skipped
		}
		if e.Write {
			for j := range p.Statuses {
				st := &p.Statuses[j]
				store.PrepareStatus(st, p.EventID, ev)
				st.ReceivedAt = e.Received
			}
			for j := range p.Inbound {
				in := &p.Inbound[j]
				store.PrepareInbound(in, p.EventID, j, ev)
				if in.ReceivedAt.IsZero() {
					in.ReceivedAt = e.Received
				}
				in.ReceivedAt = in.ReceivedAt.UTC().Truncate(store.Resolution)
			}
		}
		out = append(out, e)
	}
	return out
}

// Window is a customer's service window an ingest opens or extends: the
// customer (Recipient) last wrote to Identity at At. Release says the
// rows held for that closed window are due now: the customer wrote, so
// they need not wait out the hold (in the ingest's transaction, so that
// the window and the release are one change).
type Window struct {
	Identity, Recipient string
	At                  time.Time
	Release             bool
}

// Windows are the windows new inbound messages open: one per identity and
// sender (an upsert may not touch a row twice), at the latest message,
// in key order (so that two ingests lock shared windows in one order).
// A message without a sender opens none; one without an identity
// releases no rows.
func Windows(news []*store.Inbound) []Window {
	type key struct{ identity, recipient string }
	latest := map[key]time.Time{}
	for _, in := range news {
		if in.From == "" {
			continue
		}
		k := key{in.Identity, in.From}
		if t, ok := latest[k]; !ok || in.ReceivedAt.After(t) {
			latest[k] = in.ReceivedAt
		}
	}
	out := make([]Window, 0, len(latest))
	for k, at := range latest {
		out = append(out, Window{Identity: k.identity, Recipient: k.recipient, At: at, Release: k.identity != ""})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Identity != out[j].Identity {
			return out[i].Identity < out[j].Identity
		}
		return out[i].Recipient < out[j].Recipient
	})
	return out
}
