package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/kinds"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Processor turns stored deliveries into evidence: it parses each one,
// ingests its statuses and inbound messages (deduplicated), then applies
// pending statuses to their rows through the state machine. Every step
// reads from and writes to the store, so it can stop anywhere and a later
// run (the worker in webhook serve, or msgq webhook process from cron)
// carries on.
type Processor struct {
	Store store.Store
	// PhoneNumberIDs maps the senders webhooks name (provider.Settings.Sender:
	// WhatsApp's phone_number_ids) to identity names, so that statuses and
	// inbound messages of a kind whose webhooks name them
	// (Webhook.NamesSender) are filed under the identity they came through.
	PhoneNumberIDs map[string]string
	// TemplateIdentities maps an identity to the identities on the same
	// provider account (the same app secret), itself included: a
	// template's status is the account's, so a hold applies to all of
	// them. nil: each identity alone.
	TemplateIdentities map[string][]string
	// Batch is how many deliveries one ingest takes (0: 256).
	Batch int
	// RetryDelays are the waits before a delivery the store refused is
	// tried again alone (nil: 100ms, 500ms, 2s); after the last, it is
	// marked unreadable.
	RetryDelays []time.Duration
	// MinGap is the least time between the starts of two rounds that a
	// wake-up triggers (0: 100ms).
	MinGap time.Duration
	Log    *slog.Logger
}

// Summary counts what processing did. Field names are a JSON contract.
type Summary struct {
	Events     int `json:"events"`
	Unreadable int `json:"unreadable"`
	Statuses   int `json:"statuses"`
	Inbound    int `json:"inbound"`
	Duplicates int `json:"duplicates"`
	// Released counts held free-form texts made due at once because their
	// customer wrote (the window opened).
	Released int `json:"released"`
	// Notices counts new notices (account errors, template status, ...);
	// PausedIdentities the identities their errors paused; TemplateHeld
	// and TemplateReleased the queued rows template notices held and
	// released.
	Notices          int `json:"notices"`
	PausedIdentities int `json:"paused_identities"`
	TemplateHeld     int `json:"template_held"`
	TemplateReleased int `json:"template_released"`
	Applied          int `json:"applied"`
	Recorded         int `json:"recorded"`
	Refused          int `json:"refused"`
	// Suspect counts statuses set aside because they disagree with the
	// row they name (msgq webhook suspect).
	Suspect    int `json:"suspect"`
	Attributed int `json:"attributed"`
	Parked     int `json:"parked"`
	// OptOuts counts opt-outs and opt-ins that changed a recipient's
	// standing (an inbound STOP or START, a status whose code says the
	// recipient opted out).
	OptOuts int `json:"opt_outs"`
	// Changes lists what happened to rows, in order.
	Changes []store.AppliedEvidence `json:"changes"`
}

func (s *Summary) add(o Summary) {
	s.Events += o.Events
	s.Unreadable += o.Unreadable
	s.Statuses += o.Statuses
	s.Inbound += o.Inbound
	s.Duplicates += o.Duplicates
	s.Released += o.Released
	s.Notices += o.Notices
	s.PausedIdentities += o.PausedIdentities
	s.TemplateHeld += o.TemplateHeld
	s.TemplateReleased += o.TemplateReleased
	s.Applied += o.Applied
	s.Recorded += o.Recorded
	s.Refused += o.Refused
	s.Suspect += o.Suspect
	s.Attributed += o.Attributed
	s.Parked = o.Parked
	s.OptOuts += o.OptOuts
	s.Changes = append(s.Changes, o.Changes...)
}

func (p *Processor) minGap() time.Duration {
	if p.MinGap <= 0 {
		return 100 * time.Millisecond
	}
	return p.MinGap
}

func (p *Processor) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

// Once processes every stored delivery not yet processed, then applies
// every pending status it can, and returns what it did.
func (p *Processor) Once(ctx context.Context) (Summary, error) {
	var sum Summary
	n := p.Batch
	if n <= 0 {
		n = 256
	}
	for {
		evs, err := p.Store.WebhookPending(ctx, n)
		if err != nil {
			return sum, err
		}
		if len(evs) == 0 {
			break
		}
		ps := make([]store.IngestParams, len(evs))
		var outs []store.OptOutParams
		for i := range evs {
			var o []store.OptOutParams
			ps[i], o = p.read(&evs[i])
			outs = append(outs, o...)
			if ps[i].Err != "" || ps[i].Skipped != "" {
				sum.Unreadable++
			}
		}
		// Before the ingest that marks the deliveries processed: a crash
		// in between repeats the opt-outs, which is harmless (recording
		// is idempotent and ordered by the evidence's time), where the
		// other order could lose them.
		n, err := p.optOuts(ctx, outs)
		sum.OptOuts += n
		if err != nil {
			return sum, err
		}
		res, marked, err := p.ingest(ctx, ps)
		sum.Unreadable += marked
		if err != nil {
			return sum, err
		}
		sum.add(Summary{Events: res.Events, Statuses: res.Statuses, Inbound: res.Inbound, Duplicates: res.Duplicates, Released: res.Released,
			Notices: res.Notices, PausedIdentities: res.Paused, TemplateHeld: res.TemplateHeld, TemplateReleased: res.TemplateReleased})
		if len(evs) < n {
			break
		}
	}
	for {
		res, err := p.Store.EvidenceApply(ctx, &store.ApplyParams{Limit: 1000})
		if err != nil {
			return sum, err
		}
		var s Summary
		for _, a := range res.Applied {
			switch a.Outcome {
			case store.EvidenceApplied:
				s.Applied++
			case store.EvidenceRecorded:
				s.Recorded++
			case store.EvidenceRefused:
				s.Refused++
			case store.EvidenceSuspect:
				s.Suspect++
				p.log().Warn("webhook: status set aside as suspect", "evidence", a.EvidenceID, "detail", a.Detail)
			}
			p.log().Debug("webhook: status", "id", a.MessageID, "status", a.Status, "from", a.From, "to", a.To, "outcome", a.Outcome)
		}
		s.Changes, s.Attributed, s.Parked = res.Applied, res.Attributed, res.Parked
		sum.add(s)
		// A full page means more may be waiting; a short one that
		// changed nothing means the rest are parked.
		if len(res.Applied) < 1000 {
			break
		}
	}
	return sum, nil
}

// ingest writes a batch of read deliveries. When the store refuses the
// batch, each delivery is tried alone, a few times over a few seconds so
// that a passing error (a deadlock victim, a busy database, a connection
// being replaced) is not mistaken for the delivery's fault. One the store
// still refuses alone, while it answers reads, is marked with the store's
// error (marked counts them): one poison delivery must not stop every
// other, round after round. Its raw body is kept, and msgq webhook retry
// puts it back once the cause is fixed. A store that does not answer ends
// the round; nothing is marked.
func (p *Processor) ingest(ctx context.Context, ps []store.IngestParams) (res *store.IngestResult, marked int, err error) {
	if res, err = p.Store.WebhookIngest(ctx, ps); err == nil || ctx.Err() != nil {
		return res, 0, err
	}
	total := &store.IngestResult{}
	for _, one := range ps {
		r, err := p.ingestAlone(ctx, one)
		if err != nil {
			if _, perr := p.Store.WebhookPending(ctx, 1); perr != nil || ctx.Err() != nil || one.Err != "" {
				return total, marked, err
			}
			p.log().Error("webhook: the store refuses a delivery; marking it unreadable", "event", one.EventID, "err", err)
			if r, err = p.Store.WebhookIngest(ctx, []store.IngestParams{{EventID: one.EventID, Err: "store refused it: " + err.Error()}}); err != nil {
				return total, marked, err
			}
			marked++
		}
		total.Events += r.Events
		total.Statuses += r.Statuses
		total.Inbound += r.Inbound
		total.Duplicates += r.Duplicates
		total.Released += r.Released
		total.Notices += r.Notices
		total.Paused += r.Paused
		total.TemplateHeld += r.TemplateHeld
		total.TemplateReleased += r.TemplateReleased
	}
	return total, marked, nil
}

// ingestAlone writes one delivery, trying again after each of the retry
// delays.
func (p *Processor) ingestAlone(ctx context.Context, one store.IngestParams) (*store.IngestResult, error) {
	delays := p.RetryDelays
	if delays == nil {
		delays = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second}
	}
	for i := 0; ; i++ {
		r, err := p.Store.WebhookIngest(ctx, []store.IngestParams{one})
		if err == nil || i == len(delays) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delays[i]):
		}
	}
}

// read parses one stored delivery into what the store ingests. A body that
// cannot be read (it passed the receiver's check, so this is a parser
// change or a replayed file) is marked with the error, not retried forever;
// its raw body stays for a person.
//
// It also returns the opt-outs the delivery says: an inbound keyword the
// provider acts on (payload.Message.OptOut, OptIn), and a status whose
// error code says the recipient opted out (Kind.OptedOutOn).
func (p *Processor) read(ev *store.WebhookEvent) (store.IngestParams, []store.OptOutParams) {
	out := store.IngestParams{EventID: ev.ID}
	kind := formatKind(ev.Provider)
	if kind == nil {
		out.Err = "unknown provider " + ev.Provider
		return out, nil
	}
	b, err := kind.Webhook.Parse(ev.Body, ev.Headers)
	if err != nil {
		out.Err = err.Error()
		p.log().Error("webhook: stored delivery unreadable", "event", ev.ID, "err", err)
		return out, nil
	}
	var outs []store.OptOutParams
	for _, ig := range b.Ignored {
		p.log().Debug("webhook: ignored", "event", ev.ID, "item", ig)
	}
	for _, iv := range b.Invalid {
		p.log().Warn("webhook: item skipped", "event", ev.ID, "item", iv)
	}
	if len(b.Invalid) > 0 {
		// Kept on the delivery, which keeps its raw body from purge and
		// counts it as unreadable: it is the only record of these items.
		out.Skipped = fmt.Sprintf("%d item(s) skipped: %s", len(b.Invalid), strings.Join(b.Invalid, "; "))
	}
	for _, s := range b.Statuses {
		e := s.StatusEvidence
		e.EventID, e.Identity = ev.ID, p.identity(ev, s.PhoneNumberID)
		if p.unknownNumber(ev, s.PhoneNumberID) {
			// About a number msgq does not send for (another system's,
			// on the same app): matching it under the identity whose
			// secret verified the delivery could move a row of that
			// identity that happens to share the id.
			e.Suspect = "phone_number_id " + s.PhoneNumberID + " is no configured identity's"
		}
		out.Statuses = append(out.Statuses, e)
		if e.Status == state.Failed && e.Suspect == "" && kind.OptedOutOn != nil && kind.OptedOutOn(e.ErrorCode) {
			outs = append(outs, store.OptOutParams{Identity: e.Identity, Recipient: e.Recipient, OptedOut: true,
				Source: kind.Name + " " + e.ErrorCode, At: e.At})
		}
	}
	for _, n := range b.Notices {
		nt := n.Notice
		nt.EventID, nt.Identity = ev.ID, p.identity(ev, n.PhoneNumberID)
		if nt.Kind == store.NoticeError && kind.PausesOn != nil && !p.unknownNumber(ev, n.PhoneNumberID) {
			// The kind's code table decides, as for a send's answer: an
			// error of the identity's (a token, a locked account) pauses
			// it.
			if kind.PausesOn(nt.Code) {
				nt.PauseReason = fmt.Sprintf("%s (webhook, code %s): %s", retry.Identity, nt.Code, nt.Value)
			}
		}
		p.log().Info("webhook: notice", "event", ev.ID, "identity", nt.Identity, "kind", nt.Kind, "field", nt.Field,
			"code", nt.Code, "subject", nt.Subject, "value", nt.Value)
		out.Notices = append(out.Notices, nt)
	}
	out.TemplateIdentities = p.TemplateIdentities
	for _, m := range b.Inbound {
		in := m.Inbound
		in.EventID, in.Identity = ev.ID, p.identity(ev, m.PhoneNumberID)
		if p.unknownNumber(ev, m.PhoneNumberID) {
			// Written to a number no identity has: kept and listed under
			// that number, never linked to a row of the identity whose
			// secret verified the delivery, nor opening its window.
			in.Identity = ev.Provider + ":" + m.PhoneNumberID
		}
		p.log().Debug("webhook: inbound", "event", ev.ID, "from", recipient.Mask(recipient.SMS, in.From), "type", in.Type)
		out.Inbound = append(out.Inbound, in)
		if (m.OptOut || m.OptIn) && !p.unknownNumber(ev, m.PhoneNumberID) {
			outs = append(outs, store.OptOutParams{Identity: in.Identity, Recipient: in.From, OptedOut: m.OptOut,
				Source: "inbound " + strings.ToUpper(strings.TrimSpace(in.Text)), At: in.ReceivedAt})
		}
	}
	return out, outs
}

// optOuts records what read found, and counts the changes. One that
// names no identity (a replay without --identity) or no recipient (a
// status without its To) cannot be recorded: it is logged and left.
func (p *Processor) optOuts(ctx context.Context, outs []store.OptOutParams) (int, error) {
	n := 0
	for _, o := range outs {
		if o.Identity == "" || o.Recipient == "" {
			p.log().Warn("webhook: opt-out not recorded: no identity or no recipient", "identity", o.Identity,
				"recipient", recipient.Mask(recipient.SMS, o.Recipient), "source", o.Source)
			continue
		}
		changed, err := p.Store.SetOptOut(ctx, o)
		if err != nil {
			return n, fmt.Errorf("webhook: record opt-out: %w", err)
		}
		if changed {
			n++
			p.log().Info("webhook: opt-out recorded", "identity", o.Identity, "recipient", recipient.Mask(recipient.SMS, o.Recipient),
				"opted_out", o.OptedOut, "source", o.Source)
		}
	}
	return n, nil
}

// identity names the identity an item came through: the WhatsApp number
// it names when that number is configured, else the identity whose secret
// verified the delivery.
func (p *Processor) identity(ev *store.WebhookEvent, phoneNumberID string) string {
	if id, ok := p.PhoneNumberIDs[phoneNumberID]; ok && phoneNumberID != "" {
		return id
	}
	return ev.Identity
}

// unknownNumber says a WhatsApp item names a phone_number_id that no
// configured identity has (with none configured at all, as for a replay
// into a store without identities, nothing is unknown).
func (p *Processor) unknownNumber(ev *store.WebhookEvent, phoneNumberID string) bool {
	if k := formatKind(ev.Provider); k == nil || !k.Webhook.NamesSender || phoneNumberID == "" || len(p.PhoneNumberIDs) == 0 {
		return false
	}
	_, ok := p.PhoneNumberIDs[phoneNumberID]
	return !ok
}

// formatKind is the first kind that speaks the stored delivery's format
// (kinds.ByFormat), nil for none.
func formatKind(format string) *provider.Kind { return kinds.ByFormat(format) }

// Run processes until ctx ends: at once when woken (a delivery was
// stored), and every poll otherwise, which also retries parked statuses
// whose row has since learnt its provider id.
func (p *Processor) Run(ctx context.Context, wake <-chan struct{}, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		started := time.Now()
		if _, err := p.Once(ctx); err != nil && ctx.Err() == nil {
			// The deliveries are stored: the next round tries again.
			p.log().Error("webhook: processing failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
			// Under load a wake-up comes with every group commit. Rounds
			// at most every MinGap let deliveries gather into larger
			// ingests and leave the single SQLite writer to the
			// receiver, whose answers providers are waiting for.
			if gap := p.minGap() - time.Since(started); gap > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap):
				}
			}
		case <-t.C:
		}
	}
}
