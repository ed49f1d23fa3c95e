package store

import (
	"context"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// The evidence side of a store (docs/webhooks.md): raw webhook deliveries kept
// before they are acknowledged, the statuses and inbound messages parsed
// from them, and the customer-service windows inbound messages open.
//
// The flow is three steps, each its own durable transaction, so that a
// crash anywhere loses nothing and repeats nothing:
//
//  1. WebhookStore: the raw body, before the provider gets its 200.
//  2. WebhookIngest: the parsed statuses and inbound messages of stored
//     events, deduplicated, with the events marked processed.
//  3. EvidenceApply: pending statuses matched to rows and applied through
//     the state machine (forward only); unmatched ones stay parked.

// Webhook providers: the path segment of each endpoint.
const (
	WebhookWhatsApp = "whatsapp"
	WebhookHTTP     = "http"
)

// CounterDuplicateWebhooks names the running count of statuses and
// inbound messages that arrived again (a provider retry or a replay).
const CounterDuplicateWebhooks = "duplicate_webhooks"

// CounterReplayedWebhooks names the running count of deliveries
// WebhookStore did not store because their DedupeKey was stored already.
const CounterReplayedWebhooks = "replayed_webhooks"

// WindowHeld is the last_error the drain writes on a row of free-form text
// it put back because the recipient's customer-service window was closed.
// It marks the row as held, not failed: when the customer writes (and so
// opens the window), WebhookIngest makes such rows due at once instead of
// leaving them to wait out the hold. The stores' partial index
// messages_window_held repeats it literally, so it must not change
// without a migration.
const WindowHeld = "customer-service window closed: free-form text held"

// FallbackNext begins the last_error the drain writes on a row of
// free-form text that the provider refused because the customer-service
// window is closed (WhatsApp 131047), when the row has a fallback
// template: nothing was sent, the row is queued again at once, and its
// next claim sends the fallback template instead of the text. The
// provider's error follows on the next line, verbatim.
const FallbackNext = "customer-service window closed (the provider refused the text): the fallback template goes next"

// WebhookEvent is one raw delivery, as received.
type WebhookEvent struct {
	ID       string `json:"id"`       // set by WebhookStore
	Provider string `json:"provider"` // WebhookWhatsApp or WebhookHTTP
	// Identity is the identity whose secret verified the signature (""
	// for a replay without one); processing may name another from the
	// payload (WhatsApp's phone_number_id).
	Identity string `json:"identity"`
	// Headers are the ones that matter for an audit or a replay
	// (signature, webhook-id, webhook-timestamp, content type), by
	// lower-case name.
	Headers    map[string]string `json:"headers"`
	Body       []byte            `json:"body"`
	ReceivedAt time.Time         `json:"received_at"` // set by WebhookStore when zero
	// ProcessedAt is when WebhookIngest took the event (nil: not yet).
	ProcessedAt *time.Time `json:"processed_at"`
	// Error is why processing could not read the event, or the items it
	// had to skip in it ("" when it read everything): an event processed
	// with an error is "unreadable" (WebhookUnreadable, WebhookRetry).
	Error string `json:"error"`
	// DedupeKey names the delivery across copies, within its provider and
	// identity (provider.Webhook.DedupeKey: the provider's signed delivery
	// id, else a digest of what it signed). WebhookStore keeps one event
	// per key; "" (deliveries stored before keys were kept, and msgq
	// webhook replay's) is never a replay.
	DedupeKey string `json:"dedupe_key"`
	// Items is how many statuses, inbound messages and notices the
	// receiver read in the body: what WebhookStore adds to the
	// duplicate_webhooks counter when the delivery is a replay, as
	// processing would have counted them had it been stored again.
	Items int `json:"-"`
	// Replayed is set by WebhookStore on an event it did not store: its
	// DedupeKey was stored already (its ID is "").
	Replayed bool `json:"-"`
}

// StatusEvidence is one status a provider reported about one message.
type StatusEvidence struct {
	ID       string `json:"id"` // set by WebhookIngest
	EventID  string `json:"event_id"`
	Provider string `json:"provider"`
	Identity string `json:"identity"`
	// DedupeKey identifies the status across deliveries: the webhook id
	// where the provider sends one, else provider id|status|timestamp.
	// Unique per provider and identity.
	DedupeKey  string      `json:"dedupe_key"`
	ProviderID string      `json:"provider_id"` // the provider's message id (WhatsApp's wamid)
	Status     state.State `json:"status"`      // sent, delivered, read or failed
	At         time.Time   `json:"at"`          // the provider's timestamp
	// CallbackRef is our message id as echoed back by the provider
	// (WhatsApp's biz_opaque_callback_data, the http API's ref).
	CallbackRef string `json:"callback_ref"`
	// Recipient is the recipient the status names (WhatsApp's
	// recipient_id, the http API's "to"), E.164 with the plus; "" when
	// it names none. Where given it must be the row's recipient.
	Recipient string `json:"recipient"`
	// ErrorCode is the provider's first error code of a failed status;
	// Error the provider's error text verbatim (WhatsApp: the errors
	// array as received).
	ErrorCode string `json:"error_code"`
	Error     string `json:"error"`
	// Set by the store:
	MessageID string `json:"message_id"` // the row it was matched to ("" while parked)
	Outcome   string `json:"outcome"`    // "" while pending, else an Evidence* outcome
	// Suspect says why the status was set aside (Outcome EvidenceSuspect):
	// its reference, identity or recipient disagrees with the row its
	// provider id names. Processing may set it before ingest (a WhatsApp
	// number no identity has); the store sets it when matching.
	Suspect    string     `json:"suspect"`
	ReceivedAt time.Time  `json:"received_at"`
	AppliedAt  *time.Time `json:"applied_at"`
}

// Outcomes of a status once matched to a row.
const (
	EvidenceApplied  = "applied"  // the row moved
	EvidenceRecorded = "recorded" // stale or repeated: in history, the row kept its state
	EvidenceRefused  = "refused"  // the machine refused it (e.g. a status for a row never claimed)
	// EvidenceSuspect: set aside, never applied. The status names a row
	// by one means (provider id, or our reference) and disagrees with it
	// by another (the reference names another row, the row belongs to
	// another identity or another recipient, or its provider id names
	// several rows of the identity). A person looks at it (msgq webhook
	// suspect); it is kept, not retried.
	EvidenceSuspect = "suspect"
)

// MatchRow is what matching a status reads of a candidate row.
type MatchRow struct {
	ID, Identity, Recipient, ProviderID string
	State                               state.State
	LeaseUntil                          *time.Time
}

// MatchStatus decides which row a status is about (docs/webhooks.md:
// evidence is matched within the identity whose endpoint received it).
// byPID are the rows of st.Identity whose provider id is st.ProviderID
// (at most two are needed), ref the row st.CallbackRef names (nil when
// none, or none exists). It returns the row and whether it was found by
// the reference alone; or suspect, why the status must be set aside; or
// neither, when no row is known yet (the status stays parked).
func MatchStatus(st *StatusEvidence, byPID []MatchRow, ref *MatchRow) (row *MatchRow, byRef bool, suspect string) {
	recipientDiffers := func(r *MatchRow) bool {
		return st.Recipient != "" && r.Recipient != "" && digitsOf(st.Recipient) != digitsOf(r.Recipient)
	}
	switch {
	case len(byPID) > 1:
		return nil, false, fmt.Sprintf("provider id %s names %d messages of identity %s (%s, %s): a provider id collision",
			st.ProviderID, len(byPID), st.Identity, byPID[0].ID, byPID[1].ID)
	case len(byPID) == 1:
		r := &byPID[0]
		if st.CallbackRef != "" && st.CallbackRef != r.ID {
			return nil, false, fmt.Sprintf("provider id %s names message %s but the reference names %s", st.ProviderID, r.ID, st.CallbackRef)
		}
		if recipientDiffers(r) {
			return nil, false, fmt.Sprintf("message %s was sent to another recipient than the status names", r.ID)
		}
		return r, false, ""
	case ref == nil:
		return nil, false, ""
	case ref.Identity != st.Identity:
		return nil, false, fmt.Sprintf("the reference names message %s of identity %s, but the status came through %s",
			ref.ID, ref.Identity, orNone(st.Identity))
	case ref.ProviderID != "" && st.ProviderID != "" && ref.ProviderID != st.ProviderID:
		return nil, false, fmt.Sprintf("the reference names message %s, whose provider id is %s, not %s", ref.ID, ref.ProviderID, st.ProviderID)
	case recipientDiffers(ref):
		return nil, false, fmt.Sprintf("message %s was sent to another recipient than the status names", ref.ID)
	}
	return ref, true, ""
}

// digitsOf keeps the digits of a phone number: WhatsApp names recipients
// by bare digits, rows keep E.164 with the plus.
func digitsOf(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			b = append(b, s[i])
		}
	}
	return string(b)
}

func orNone(s string) string {
	if s == "" {
		return "no identity"
	}
	return s
}

// Collision is a row whose provider id another row of its identity has
// too: rows that shared one before provider ids were unique per identity,
// or a provider that issued an id twice. Evidence naming the id is set
// aside as suspect, never applied to either; a person settles the rows
// (msgq show, msgq resolve). Field names in JSON are a contract.
type Collision struct {
	MessageID  string      `json:"message_id"`
	Identity   string      `json:"identity"`
	ProviderID string      `json:"provider_id"`
	State      state.State `json:"state"`
	CreatedAt  time.Time   `json:"created_at"`
}

// Inbound is one message a customer sent us. Field names in JSON are a
// contract (msgq inbox -o json).
type Inbound struct {
	ID       string `json:"id"` // set by WebhookIngest
	EventID  string `json:"event_id"`
	Provider string `json:"provider"`
	Identity string `json:"identity"`
	// ProviderMessageID is the provider's id of the inbound message;
	// unique per provider and identity, so a redelivery is a duplicate.
	ProviderMessageID string `json:"provider_message_id"`
	From              string `json:"from"` // E.164 with the plus
	Type              string `json:"type"` // the provider's message type (text, button, interactive, ...)
	Text              string `json:"text"`
	// ReplyID is the id of the button or list row the customer chose
	// (WhatsApp's button_reply.id, list_reply.id or a quick reply's
	// payload): replies are matched by it, never by ReplyTitle.
	ReplyID    string `json:"reply_id"`
	ReplyTitle string `json:"reply_title"`
	// ContextID is the provider id of the message replied to.
	ContextID string `json:"context_id"`
	// MessageID is the row replied to, nil when no row could be linked.
	MessageID  *string   `json:"message_id"`
	ReceivedAt time.Time `json:"received_at"` // the provider's timestamp
	StoredAt   time.Time `json:"stored_at"`   // set by WebhookIngest
}

// Notice kinds: what a provider said that is about no message in
// particular.
const (
	// NoticeError: an error about the account or number, not a message
	// (WhatsApp's value.errors, e.g. 130429 or 131031).
	NoticeError = "error"
	// NoticeTemplate: a template's review status changed (WhatsApp's
	// message_template_status_update); PAUSED, DISABLED and REJECTED hold
	// the queued rows that use it, APPROVED releases them.
	NoticeTemplate = "template"
	// NoticeQuality: the number's quality rating or messaging limit
	// changed (phone_number_quality_update).
	NoticeQuality = "quality"
	// NoticeAccount: an account update, review or alert (account_update,
	// account_review_update, account_alerts, business_capability_update).
	NoticeAccount = "account"
	// NoticeUnknown: a webhook field or event type msgq does not
	// understand; kept, counted and listed, never silently dropped.
	NoticeUnknown = "unknown"
)

// Notice is one thing a provider said about an identity rather than a
// message. Field names in JSON are a contract (msgq webhook notices).
type Notice struct {
	ID       string `json:"id"` // set by WebhookIngest
	EventID  string `json:"event_id"`
	Provider string `json:"provider"`
	Identity string `json:"identity"`
	Kind     string `json:"kind"`  // a Notice* kind
	Field    string `json:"field"` // the provider's name for it (WhatsApp's change field, the http event type)
	// Code is an error code (NoticeError); Subject the template's name
	// (NoticeTemplate) or the number; Lang the template's language; Value
	// the event (APPROVED, PAUSED, FLAGGED, ...).
	Code    string `json:"code"`
	Subject string `json:"subject"`
	Lang    string `json:"lang"`
	Value   string `json:"value"`
	// Detail is the provider's JSON of it, verbatim.
	Detail string `json:"detail"`
	// DedupeKey identifies it across redeliveries (the parser's).
	DedupeKey  string    `json:"dedupe_key"`
	At         time.Time `json:"at"` // the provider's time, zero when it gave none
	ReceivedAt time.Time `json:"received_at"`
	// PauseReason, set by processing when the retry table says the error
	// is the identity's (a token, a blocked account), pauses the identity
	// with that reason in the ingest that writes the notice: once, so a
	// redelivery does not pause again an identity an operator resumed.
	PauseReason string `json:"-"`
}

// TemplateHold is a template a provider reported unusable for an
// identity: its queued rows wait until it is approved again.
type TemplateHold struct {
	Identity string    `json:"identity"`
	Template string    `json:"template"`
	Lang     string    `json:"lang"`
	Status   string    `json:"status"` // PAUSED, DISABLED or REJECTED
	Since    time.Time `json:"since"`  // the provider's time of that status (else when msgq got it)
	// Held counts the identity's queued rows of that template the hold
	// has put back (their last_error says so).
	Held int `json:"held"`
}

// TemplateHeldError is the last_error of a queued row held because its
// template was reported paused, disabled or rejected. WebhookIngest
// writes it on the queued rows when the hold starts, the drain on a row it
// claims while the hold lasts, and an APPROVED notice releases exactly the
// rows that carry it (due at once, last_error kept as history of why).
func TemplateHeldError(template, lang string) string {
	return TemplateHeldPrefix + template + " (" + lang + ") is held: the provider reported it paused, disabled or rejected"
}

// TemplateReleasedNote replaces TemplateHeldError on the rows a template
// notice (status) released.
func TemplateReleasedNote(template, lang, status string) string {
	return "template " + template + " (" + lang + ") reported " + status + " again: released"
}

// TemplateHeldPrefix begins every TemplateHeldError.
const TemplateHeldPrefix = "template hold: "

// TemplateHoldFor is how long a held row waits before a drain looks at it
// again (it is released at once when the template is approved).
const TemplateHoldFor = time.Hour

// HoldsTemplate says whether status (a template status event) holds the
// template's queued rows, and whether it releases them.
func HoldsTemplate(status string) (hold, release bool) {
	switch status {
	case "PAUSED", "DISABLED", "REJECTED":
		return true, false
	case "APPROVED", "REINSTATED":
		return false, true
	}
	return false, false
}

// IngestParams is what processing read from one stored event.
//
// Err, when set, says the event could not be read: it is marked processed
// with that error and nothing else is written (Statuses, Inbound and
// Skipped are ignored).
//
// Skipped, when set (and Err is not), says processing read the event but
// had to skip some of its items (the parser's Batch.Invalid, joined): the
// good Statuses and Inbound are written as usual, and the event is marked
// processed with Skipped as its error. So it counts as unreadable, and
// retention keeps its raw body, the only record of the skipped items.
type IngestParams struct {
	EventID  string
	Statuses []StatusEvidence
	Inbound  []Inbound
	// Notices are what the event said about identities, not messages.
	// A new template notice that holds or releases a template applies
	// to every identity in TemplateIdentities[notice.Identity] (the
	// identities on the same provider account), or its own alone.
	Notices            []Notice
	TemplateIdentities map[string][]string
	Err                string
	Skipped            string
}

// IngestResult counts what WebhookIngest wrote.
type IngestResult struct {
	Events     int // events marked processed
	Statuses   int // new statuses (pending until applied)
	Inbound    int // new inbound messages
	Duplicates int // statuses and inbound messages seen before
	// Reread counts statuses and inbound messages an earlier processing
	// of the same event already wrote (an event put back by WebhookRetry):
	// neither new nor duplicates, as the provider did not send them again.
	Reread   int
	Released int // held rows (WindowHeld) made due by new inbound messages
	// Notices counts new notices; Paused the identities a new one paused.
	Notices, Paused int
	// TemplateHeld and TemplateReleased count queued rows a template
	// notice held or released.
	TemplateHeld, TemplateReleased int
}

// DueBatch bounds the statuses, and the replies linked to no message, that
// one EvidenceApply examines among those due (new, or parked and due to be
// tried again: their retry_at): a round reads at most this many whatever
// the backlog. After an upgrade to schema 24 the whole backlog is due
// once, and rounds work through it this many at a time.
const DueBatch = 10000

// ApplyParams bounds EvidenceApply.
type ApplyParams struct {
	Limit int       // at most this many statuses; 0: 1000
	Now   time.Time // zero: the store's clock
}

// AppliedEvidence is one status EvidenceApply matched to a row.
type AppliedEvidence struct {
	EvidenceID string      `json:"evidence_id"`
	MessageID  string      `json:"message_id"`
	ProviderID string      `json:"provider_id"`
	Status     state.State `json:"status"`
	From       state.State `json:"from"`
	To         state.State `json:"to"`
	Outcome    string      `json:"outcome"`
	Detail     string      `json:"detail"`
}

// ApplyResult is what one EvidenceApply did.
type ApplyResult struct {
	Applied []AppliedEvidence `json:"applied"`
	// Parked counts pending statuses still without a row (or whose row a
	// drain still holds the lease of) after the run.
	Parked int `json:"parked"`
	// Attributed counts inbound messages linked to a row in this run
	// (their reply context became known).
	Attributed int `json:"attributed"`
}

// InboxParams filters InboxList. Zero values mean "any".
type InboxParams struct {
	Unattributed bool
	// MessageID keeps the inbound messages linked to that row (replies,
	// reactions).
	MessageID string
	Identity  string
	From      string
	Since     time.Time // received at or after
	Limit     int       // 0: DefaultListLimit
}

// WebhookStats are the evidence figures Stats reports.
type WebhookStats struct {
	// DuplicateWebhooks counts statuses and inbound messages that arrived
	// again, since the store was created: those processing found stored
	// already, and those of deliveries WebhookStore did not store again.
	DuplicateWebhooks int64 `json:"duplicate_webhooks"`
	// ReplayedWebhooks counts deliveries answered 200 but not stored
	// again, as their dedupe key was stored already (a provider's retry,
	// or a captured delivery replayed), since the store was created.
	ReplayedWebhooks int64 `json:"replayed_webhooks"`
	// UnattributedInbound counts inbound messages linked to no row.
	UnattributedInbound int `json:"unattributed_inbound"`
	// ParkedEvidence counts statuses waiting for their row.
	ParkedEvidence int `json:"parked_evidence"`
	// UnprocessedWebhooks counts stored events not yet processed.
	UnprocessedWebhooks int `json:"unprocessed_webhooks"`
	// UnreadableWebhooks counts unreadable events: those processed with
	// an error (nothing was read from them) or with skipped items (some
	// were not), whose bodies wait for a person (or a fixed parser and a
	// WebhookRetry). WebhookPurge never drops them.
	UnreadableWebhooks int `json:"unreadable_webhooks"`
	// SuspectEvidence counts statuses set aside because they disagree
	// with the row they name (EvidenceSuspect).
	SuspectEvidence int `json:"suspect_evidence"`
	// ProviderIDCollisions counts rows whose provider id another row of
	// their identity has too (Collision).
	ProviderIDCollisions int `json:"provider_id_collisions"`
	// Notices counts what providers said about identities rather than
	// messages; UnknownNotices those msgq did not understand.
	Notices        int `json:"notices"`
	UnknownNotices int `json:"unknown_notices"`
	// TemplateHolds counts templates reported unusable; TemplateHeldRows
	// the queued rows they hold.
	TemplateHolds    int `json:"template_holds"`
	TemplateHeldRows int `json:"template_held_rows"`
}

// WebhookPurged counts what WebhookPurge dropped (with DryRun: would drop).
// Field names in JSON are a contract (msgq purge -o json).
type WebhookPurged struct {
	Events  int `json:"webhook_events"` // raw deliveries deleted
	Inbound int `json:"inbound_texts"`  // inbound messages whose text was blanked
}

// Evidence is the part of a Store that keeps webhook evidence.
type Evidence interface {
	// WebhookStore keeps raw events in one durable transaction, assigning
	// their IDs (and ReceivedAt when zero) in place. Only after it returns
	// may the provider be told 200.
	//
	// An event whose DedupeKey (non-empty) the store holds already for
	// its provider and identity, or that an earlier event of evs carries,
	// is not written: a unique index decides, never a read before the
	// write, and the first copy's body is kept untouched. Such an event is
	// marked Replayed (its ID set to ""), and counted in the same
	// transaction: 1 in CounterReplayedWebhooks and its Items in
	// CounterDuplicateWebhooks. It is durable too (the first copy is), so
	// it may be answered 200 as well.
	WebhookStore(ctx context.Context, evs []WebhookEvent) error

	// WebhookPending returns up to limit events not yet processed,
	// oldest first.
	WebhookPending(ctx context.Context, limit int) ([]WebhookEvent, error)

	// WebhookGet returns one stored event. Errors: ErrNotFound.
	WebhookGet(ctx context.Context, id string) (*WebhookEvent, error)

	// WebhookUnreadable returns up to limit (0: DefaultListLimit)
	// unreadable events, i.e. processed with an error or with skipped
	// items (Error set), oldest received first, bodies included.
	WebhookUnreadable(ctx context.Context, limit int) ([]WebhookEvent, error)

	// WebhookRetry puts an unreadable event back to pending (no
	// ProcessedAt, no Error), so that the next processing run reads it
	// again (once the parser is fixed, say). Ingest is idempotent: what
	// the earlier processing of the event already wrote is written
	// nothing twice, and counted as Reread, not as a duplicate (an item
	// that was already a duplicate of another event's is counted again).
	// Errors: ErrNotFound for an unknown id (or one purged); an
	// *InvalidError for an event with nothing to retry (pending, or
	// processed without an error).
	WebhookRetry(ctx context.Context, id string) error

	// WebhookIngest writes what processing read from stored events, in one
	// durable transaction: new statuses (pending), new inbound messages
	// (linked to the row whose provider_id is their ContextID, when
	// there is one), each inbound message's window (ServiceWindow moves
	// to the latest ReceivedAt), the duplicate counter, and every event
	// marked processed (with Err, or else Skipped, as its error). An
	// event already processed is skipped, so running it twice writes
	// nothing twice. A status whose DedupeKey or an inbound message whose
	// ProviderMessageID the store already has is not written: a
	// duplicate, counted (Duplicates and the store's counter), unless the
	// store had it from this very event before this call (an event put
	// back by WebhookRetry, or a second ingest of an id the store has no
	// event of), which is Reread and not counted as a duplicate.
	//
	// Each new inbound message with a From and an Identity also releases
	// the rows the drain held for that window: queued rows of that
	// identity and recipient whose last_error is WindowHeld and whose
	// next_attempt_at is later get next_attempt_at = the store's now, so
	// the text goes out as soon as a drain claims it rather than after the
	// hold. That is scheduling, not a state change (as PaceDefer): no
	// transition, no history. A duplicate releases nothing.
	//
	// Notices are written too, deduplicated by (provider, identity,
	// DedupeKey) and counted as statuses are. A new one with a
	// PauseReason pauses its identity (as IdentityPause). A new template
	// notice whose status holds or releases (HoldsTemplate) records that
	// status, as of the notice's At, for each of its identities
	// (TemplateIdentities), unless a later status is recorded (Meta's
	// order is not guaranteed: a stale notice changes nothing). A hold
	// puts back their queued rows of that template and language
	// (last_error TemplateHeldError, next_attempt_at at least
	// TemplateHoldFor away); a release makes exactly the rows carrying
	// TemplateHeldError due now (last_error TemplateReleasedNote).
	// Scheduling again: no transition, no history.
	WebhookIngest(ctx context.Context, ps []IngestParams) (*IngestResult, error)

	// EvidenceApply matches pending statuses to rows within their
	// identity (MatchStatus: by (identity, provider_id), or by
	// CallbackRef naming a row of that identity whose provider_id is
	// empty or equal); a status that disagrees with the row it names is
	// set aside as EvidenceSuspect, with why, and never applied. It goes
	// oldest provider timestamp first, and applies each through
	// state.Transition (event Evidence, source webhook) in its own
	// conditional write with a history row: forward only, a stale status
	// recorded in history but not applied. A failed status that applies
	// carries its ErrorCode and Error verbatim into the row's last_error;
	// a status matched by CallbackRef records its ProviderID on the row.
	// A status whose row is in sending under a live lease stays parked:
	// the drain holding it will record the answer. It also links
	// unattributed inbound messages whose ContextID has become known.
	EvidenceApply(ctx context.Context, p *ApplyParams) (*ApplyResult, error)

	// EvidenceList returns the statuses recorded for the row id (matched
	// to it), oldest first, or, with id "", the parked ones.
	EvidenceList(ctx context.Context, id string, limit int) ([]StatusEvidence, error)

	// EvidenceSuspects returns up to limit (0: DefaultListLimit) statuses
	// set aside as suspect, oldest received first.
	EvidenceSuspects(ctx context.Context, limit int) ([]StatusEvidence, error)

	// ProviderIDCollisions returns up to limit (0: DefaultListLimit) rows
	// whose provider id another row of their identity has too, by
	// identity and provider id.
	ProviderIDCollisions(ctx context.Context, limit int) ([]Collision, error)

	// InboxList returns inbound messages matching p, newest first.
	InboxList(ctx context.Context, p *InboxParams) ([]Inbound, error)

	// ServiceWindow returns when the customer last wrote to identity from
	// recipient (E.164), or the zero time when never: the
	// customer-service window is open until that time plus its length.
	ServiceWindow(ctx context.Context, identity, recipient string) (time.Time, error)

	// NoticeList returns up to limit (0: DefaultListLimit) notices, newest
	// received first; with kind set, of that kind only.
	NoticeList(ctx context.Context, kind string, limit int) ([]Notice, error)

	// TemplateHolds returns the templates currently held (their latest
	// status holds), by identity.
	TemplateHolds(ctx context.Context) ([]TemplateHold, error)

	// WebhookStats returns the evidence figures.
	WebhookStats(ctx context.Context) (*WebhookStats, error)

	// WebhookPurge is retention for webhook data, which is customer data
	// (raw bodies, what customers wrote):
	//
	//   - it deletes the raw events processed without an error and
	//     received before p.Before. An unreadable event (processed with an
	//     error or with skipped items), or one not yet processed, is kept
	//     whatever its age: a person or a later run still needs its body;
	//   - it blanks text and reply_title of inbound messages stored before
	//     p.Before, keeping the row with its ids, from, reply_id and
	//     message_id: deduplication (a redelivery is still a duplicate)
	//     and attribution need them. A row whose text and reply_title are
	//     both empty is the purged state (one that arrived without either
	//     has nothing to drop), so a purged row is never counted again.
	//
	// Statuses (evidence) and windows are kept: they are small, and
	// deduplication and the history of rows rest on them. p.Tenant and
	// p.Purpose do not apply: webhooks belong to no tenant and no purpose,
	// so a caller filtering messages by either should not call this. With
	// p.DryRun it counts and writes nothing. It works in bounded
	// transactions (as MessagePurge), so an interrupted run can be run
	// again; on an error it returns what the batches committed so far did
	// along with the error.
	WebhookPurge(ctx context.Context, p *PurgeParams) (*WebhookPurged, error)
}

// IngestedEvent is a stored event as a store's ingest reads it.
type IngestedEvent struct {
	Provider, Identity string
	ReceivedAt         time.Time
	Processed          bool
}

func (ev *IngestedEvent) origin() (provider, identity string) {
	if ev == nil {
		return "", ""
	}
	return ev.Provider, ev.Identity
}

// PrepareStatus completes a status as a store's ingest keeps it: its
// event, the event's provider and identity when the parser named none (ev
// is nil for an event the store does not have), and a dedupe key when the
// provider sent no delivery id (docs/webhooks.md: provider id, status and
// timestamp identify a status across deliveries).
func PrepareStatus(st *StatusEvidence, eventID string, ev *IngestedEvent) {
	provider, identity := ev.origin()
	st.EventID = eventID
	if st.Provider == "" {
		st.Provider = provider
	}
	if st.Identity == "" {
		st.Identity = identity
	}
	st.At = st.At.UTC().Truncate(Resolution)
	if st.DedupeKey == "" {
		st.DedupeKey = fmt.Sprintf("%s|%s|%d", st.ProviderID, st.Status, st.At.Unix())
	}
	st.ID, st.MessageID, st.Outcome, st.AppliedAt = "", "", "", nil
}

// PrepareInbound completes the j-th inbound message of an event as a
// store's ingest keeps it. One without a provider id is named by its
// event and position, so that at least a replay of that event is a
// duplicate.
func PrepareInbound(in *Inbound, eventID string, j int, ev *IngestedEvent) {
	provider, identity := ev.origin()
	in.EventID = eventID
	if in.Provider == "" {
		in.Provider = provider
	}
	if in.Identity == "" {
		in.Identity = identity
	}
	if in.ProviderMessageID == "" {
		in.ProviderMessageID = fmt.Sprintf("%s#%d", eventID, j)
	}
	in.ID = ""
}

// PrepareNotice completes the j-th notice of an event as a store's ingest
// keeps it: its event, the event's provider and identity where the notice
// names none, and a dedupe key by event and position when the provider
// gave none (a replay of that event is then a duplicate).
func PrepareNotice(n *Notice, eventID string, j int, ev *IngestedEvent) {
	provider, identity := ev.origin()
	n.EventID = eventID
	if n.Provider == "" {
		n.Provider = provider
	}
	if n.Identity == "" {
		n.Identity = identity
	}
	if n.DedupeKey == "" {
		n.DedupeKey = fmt.Sprintf("%s#%d", eventID, j)
	}
}

// TemplateIdentitiesOf are the identities a template notice of identity
// applies to: those in TemplateIdentities, else identity alone.
func (p *IngestParams) TemplateIdentitiesOf(identity string) []string {
	if ids := p.TemplateIdentities[identity]; len(ids) > 0 {
		return ids
	}
	return []string{identity}
}

// HistoryDetail is the history detail of a status, e.g. "whatsapp status
// delivered at 2026-11-29T10:00:00Z (wamid.X)".
func (st *StatusEvidence) HistoryDetail() string {
	d := fmt.Sprintf("%s status %s at %s", st.Provider, st.Status, st.At.UTC().Format(time.RFC3339))
	if st.ProviderID != "" {
		d += " (" + st.ProviderID + ")"
	}
	if st.ErrorCode != "" {
		d += " error " + st.ErrorCode
	}
	return d
}

// LastError is what a failed status leaves in last_error: the provider's
// code and its error text verbatim, never a summary.
func (st *StatusEvidence) LastError() string {
	switch {
	case st.ErrorCode != "" && st.Error != "":
		return st.ErrorCode + ": " + st.Error
	case st.Error != "":
		return st.Error
	case st.ErrorCode != "":
		return st.ErrorCode
	}
	return st.Provider + " reported the message failed, without an error"
}
