// Package store defines msgq's storage contract: the domain types every
// store speaks and the Store interface that the SQLite and PostgreSQL
// implementations satisfy. Driver types never cross this boundary.
//
// Every state change a store makes goes through state.Transition and is
// written conditionally on the state the store read, with a history row in
// the same transaction.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/msgq/msgq/internal/state"
)

// Listener is implemented by stores that can tell a waiting drain when
// rows are enqueued (PostgreSQL's LISTEN/NOTIFY), so that an idle drain
// --follow wakes at once instead of at its next poll.
type Listener interface {
	// Enqueued returns a channel that receives a value soon after rows are
	// enqueued, by any process, until ctx ends. Wake-ups are coalesced and
	// may be spurious (also after a lost connection is re-established:
	// rows may have arrived meanwhile); a drain always claims to find out.
	Enqueued(ctx context.Context) (<-chan struct{}, error)
}

// Store is one message queue's durable state.
//
// Implementations must be safe for concurrent use by many goroutines, and
// correct when many processes (and, for shared databases, many hosts) use the
// same database at once: uniqueness is enforced by the database's unique
// index, never by check-then-insert.
type Store interface {
	OptOuts
	DailyRecipients
	Challenges
	APIKeys
	Events
	// Migrate brings the schema to the newest version this binary knows and
	// returns the versions it applied (none when already current). It is
	// safe to run from several processes at once. Errors: ErrSchemaTooNew
	// when the database was migrated by a newer msgq.
	Migrate(ctx context.Context) ([]int, error)

	// MessageEnqueue creates one logical send, or returns the existing row
	// when (tenant, key) exists with the same body hash (Replayed is true;
	// nothing is written but the replay count Stats reports). An existing
	// row refused for a policy reason before any call (failed, opted_out,
	// no attempt) whose condition no longer holds (the recipient is not
	// opted out of the identity now, read in the same transaction) is
	// revived instead: queued again, scheduled as p says, with a history
	// row (event revive(opted_out), source send), and Revived is true. Errors: *InvalidError when p fails Validate;
	// *ConflictError (errors.Is ErrConflict) when the key exists with another
	// body, naming the existing row (nothing is written but the conflict
	// count Stats reports).
	MessageEnqueue(ctx context.Context, p *EnqueueParams) (*EnqueueResult, error)

	// MessageEnqueueMany enqueues a batch in one durable transaction, with
	// the same per-item semantics as MessageEnqueue: each result is in input
	// order and carries its own Err (*InvalidError or *ConflictError) while
	// the good items are written. Two items with one key behave as if sent
	// one after the other. The returned error is for the batch as a whole
	// (nothing of it was written).
	MessageEnqueueMany(ctx context.Context, ps []EnqueueParams) ([]EnqueueResult, error)

	// MessageGet returns the row of tenant whose id or, failing that, whose
	// key is ref. Errors: ErrNotFound.
	MessageGet(ctx context.Context, tenant, ref string) (*Message, error)

	// MessageList returns rows matching p, newest first. Errors: *InvalidError
	// for a bad filter.
	MessageList(ctx context.Context, p *ListParams) ([]Message, error)

	// MessageCount counts the rows matching p's filters (p.Limit is
	// ignored), counting no further than upTo (<= 0: no bound), so that a
	// caller saying "N more" does not scan a whole table for it.
	// Errors: *InvalidError for a bad filter.
	MessageCount(ctx context.Context, p *ListParams, upTo int) (int, error)

	// MessageHistory returns every state change of the row id, oldest first
	// (empty, not an error, for an unknown id).
	MessageHistory(ctx context.Context, id string) ([]HistoryEntry, error)

	// MessageAttempts returns every provider call made for the row id,
	// oldest first (empty, not an error, for an unknown id).
	MessageAttempts(ctx context.Context, id string) ([]Attempt, error)

	// MessageTransition applies one event to the row p.ID through
	// state.Transition, conditionally on the row still being in p.From (and
	// under the lease p.LeaseOwner, p.LeaseUntil when set), writing a
	// history row and, when p.Attempt is set, an attempt row in the same
	// transaction. Errors: ErrNotFound; ErrStale when the row moved on
	// (another writer won; with p.KeepIfStale the attempt and a not-applied
	// history row are written all the same); ErrLeaseLive for an operator
	// verdict or a takeover of a sending row whose lease is not over
	// (LeaseOver: TakeoverMargin past lease_until); *state.RefusedError
	// when the machine refuses the event.
	MessageTransition(ctx context.Context, p *TransitionParams) (*Message, error)

	// MessageTransitionMany applies several transitions in one durable
	// transaction (drain's outcomes: one commit for many calls). Each
	// result carries its own error, with the meanings of
	// MessageTransition's, and an item that fails writes nothing while the
	// others apply. The returned error is for the batch as a whole
	// (nothing of it was written).
	MessageTransitionMany(ctx context.Context, ps []TransitionParams) ([]TransitionResult, error)

	// MessageClaim leases up to p.Limit due rows to p.Owner for
	// p.LeaseFor, reply lane first, then by next_attempt_at: each moves to
	// sending with its attempt counted, in one durable transaction that
	// commits before any provider call is made. Rows of paused identities
	// are skipped. Due rows past their deadline are failed as expired on
	// the way (history source "drain"). Pacing (p.Pacing, shared through
	// the store by every drain process) gives each claimed row a slot
	// before which its call must not start; rows whose identity or
	// recipient has no slot within p.Horizon stay queued. Errors:
	// *InvalidError for bad parameters.
	MessageClaim(ctx context.Context, p *ClaimParams) ([]Claimed, error)

	// PaceDefer pushes back the next slot of an identity (recipient "")
	// or of one of its recipients to at least until: a provider's rate
	// limit slows every drain, not just the row that met it. An earlier
	// until than the current slot changes nothing.
	PaceDefer(ctx context.Context, identity, recipient string, until time.Time) error

	// IdentityPause stops claims for an identity (its rows stay queued)
	// and records why. Pausing a paused identity updates the reason.
	IdentityPause(ctx context.Context, name, reason string) error

	// IdentityResume lets claims for an identity start again. Resuming an
	// identity that is not paused is not an error.
	IdentityResume(ctx context.Context, name string) error

	// IdentityStates returns every identity the store knows of (paused
	// ones, and those with rows), with its queue counts, by name.
	IdentityStates(ctx context.Context) ([]IdentityState, error)

	// MessageStuck returns the rows a person must look at: rows in sending
	// whose lease is over (LeaseOver) or whose claim is older than p.OlderThan,
	// and rows in unknown older than p.OlderThan, oldest first, each with
	// the provider code of its last attempt. An unknown row stays listed
	// past its deadline (Message.PastDeadline; a challenge step's is its
	// challenge's) until evidence or a person settles it. Errors:
	// *InvalidError for a bad filter.
	MessageStuck(ctx context.Context, p *StuckParams) ([]StuckMessage, error)

	// MessageNoteMany records, for each item whose row is still in
	// p.State, p.Note as the row's reconcile note (migration 0025): why
	// reconcile could not settle it, for msgq stuck to show
	// (StuckMessage.Note). Nothing else of the row changes: not its
	// state, updated_at (its age) or history. Items whose row is gone or
	// moved on are skipped; of two items for one row the later wins. One
	// durable transaction.
	MessageNoteMany(ctx context.Context, ps []NoteParams) error

	// MessageProviderIDOwners returns the rows of identity (of any
	// tenant: provider ids are unique per identity, as evidence matching
	// reads them) whose provider id is one of ids, ordered by provider id
	// and row id. A provider id two rows record (a collision, migration
	// 0008) returns both. It reads the index messages_identity_provider_id
	// only, whatever the table's size.
	MessageProviderIDOwners(ctx context.Context, identity string, ids []string) ([]ProviderIDOwner, error)

	// Stats returns the queue's vital signs at p.Now (docs/operations.md).
	Stats(ctx context.Context, p *StatsParams) (*Stats, error)

	// ClockNow returns the store's clock: the time every decision that
	// several processes share is made at (claims, leases, pacing slots,
	// schedules, deadlines, ages). PostgreSQL: the database server's
	// clock, so that drains on hosts whose clocks disagree still agree;
	// SQLite: the host's (every process of the store runs on it).
	ClockNow(ctx context.Context) (time.Time, error)

	// ClockOffsetRecord records a process's measured offset from the
	// store's clock, for Stats (ClockOffset). Stores whose clock is the
	// host's (SQLite) keep nothing: the offset is zero by construction.
	ClockOffsetRecord(ctx context.Context, p *ClockOffset) error

	// MessagePurge drops the payloads (and their attempts' raw error
	// bodies) of finished rows (sent, delivered, read, failed) created
	// before p.Before, keeping tenant, key, body hash and state, so that a
	// replay of an old key is still a replay, never a new send. It returns
	// how many rows it purged (with p.DryRun: would purge).
	MessagePurge(ctx context.Context, p *PurgeParams) (int, error)

	// Evidence keeps webhook deliveries and what they say (webhook.go).
	Evidence

	// Close releases the store's connections.
	Close() error
}

// StuckParams filters MessageStuck.
type StuckParams struct {
	// OlderThan is the age (since the row entered its state) past which a
	// row is listed; a sending row whose lease has expired is listed at
	// any age.
	OlderThan time.Duration
	// State limits the list to sending or unknown ("" for both).
	State state.State
	// LeaseExpired lists only sending rows whose lease is over (LeaseOver:
	// TakeoverMargin past lease_until; what reconcile takes over), whatever
	// OlderThan says.
	LeaseExpired bool
	Tenant       string
	Identity     string
	Purpose      string
	Now          time.Time // zero: the store's clock
	Limit        int       // 0: DefaultListLimit
}

// StuckMessage is a row MessageStuck lists.
type StuckMessage struct {
	Message
	// LastCode is the provider code of the row's last attempt ("" when
	// none, or the attempt had no code).
	LastCode string
	// Note is the row's reconcile note (MessageNoteMany): why the latest
	// reconcile left it for a person. "" when none, and for a row not
	// unknown (only unknown rows are noted).
	Note string
}

// NoteParams is one note to record (MessageNoteMany).
type NoteParams struct {
	ID    string
	State state.State // the state the row must still be in
	Note  string
}

// ProviderIDOwner is a row that records a provider id
// (MessageProviderIDOwners).
type ProviderIDOwner struct {
	ProviderID string
	ID         string
	Tenant     string
	Key        string
	ResendOf   string
	State      state.State
}

// SortOwners orders os as MessageProviderIDOwners returns them: by
// provider id, then row id.
func SortOwners(os []ProviderIDOwner) {
	slices.SortFunc(os, func(a, b ProviderIDOwner) int {
		return cmp.Or(cmp.Compare(a.ProviderID, b.ProviderID), cmp.Compare(a.ID, b.ID))
	})
}

// StatsParams says what Stats measures.
type StatsParams struct {
	Now time.Time // zero: the store's clock
	// Window is the span of the recent figures (attempts by class,
	// delivery latency); zero means one hour.
	Window time.Duration
	// ProgressIdentities are the identities whose webhooks msgq receives:
	// only their sent rows can be expected to make progress (VitalStats.
	// SentProgress). NoProgressAfter is how long a sent row may wait for
	// it; zero means DefaultNoProgressAfter.
	ProgressIdentities []string
	NoProgressAfter    time.Duration
}

// Stats are the queue's vital signs. Field names are a JSON contract.
type Stats struct {
	At time.Time `json:"at"`
	// Counts are the rows by identity and state (states with rows only).
	Counts []StateCount `json:"counts"`
	// OldestEligible is the due time of the oldest queued row a drain
	// could claim now (due, within its deadline, identity not paused):
	// its age is the alert that fires for every kind of stuck drain. Nil
	// when there is none.
	OldestEligible *time.Time `json:"oldest_eligible_due_at"`
	// OldestIntake is when the oldest row still waiting in intake was
	// taken in by PostgreSQL's enqueue() (docs/sql-enqueue.md): its age
	// says admission is not running for its identity. Nil when none
	// waits (always on SQLite).
	OldestIntake *time.Time `json:"oldest_intake_at"`
	// SendingPastLease counts rows in sending whose lease has expired.
	SendingPastLease int `json:"sending_past_lease"`
	// Unknown counts rows in unknown.
	Unknown int `json:"unknown"`
	// KeyReplays counts sends that found their key with the same body
	// (something ran twice), since the store was created.
	KeyReplays int64 `json:"key_replays"`
	// AttemptsByClass counts provider calls finished within Window, by
	// outcome class.
	AttemptsByClass map[string]int `json:"attempts_by_class"`
	// Delivered counts rows delivered within Window, and DeliveryP50/P95
	// are their sent-to-delivered latencies (zero when none).
	Delivered   int           `json:"delivered"`
	DeliveryP50 time.Duration `json:"delivery_p50_ns"`
	DeliveryP95 time.Duration `json:"delivery_p95_ns"`
	Window      time.Duration `json:"window_ns"`
	// ClockOffset is the largest (by magnitude, sign kept: positive is a
	// host clock ahead of the store's) offset from the store's clock that
	// a drain, reconcile or webhook serve measured within
	// ClockOffsetRecent, and ClockOffsetProcess the process that measured
	// it ("" when none reported). Always zero on SQLite.
	ClockOffset        time.Duration `json:"clock_offset_ns"`
	ClockOffsetProcess string        `json:"clock_offset_process"`
	// The evidence figures (duplicate webhooks, unattributed inbound,
	// parked statuses, unprocessed events), flattened into the JSON.
	WebhookStats
	// Key conflicts, long sends, failures by reason, resends, maybe_sent
	// rows and sent progress (vitals.go), flattened into the JSON.
	VitalStats
}

// ClockOffsetRecent is how old a process's offset measurement may be and
// still count in Stats: processes measure every minute, so a process that
// stopped drops out of the figure after a few missed measurements.
const ClockOffsetRecent = 10 * time.Minute

// ClockOffset is one process's measurement of its host clock against the
// store's clock.
type ClockOffset struct {
	// Process names the measuring process (a drain's lease owner, or
	// role@host:pid), unique per process.
	Process string
	Host    string
	Role    string // drain, reconcile or webhook serve
	// Offset is the host's clock minus the store's, measured at the
	// midpoint of the round trip; RTT is that round trip.
	Offset time.Duration
	RTT    time.Duration
}

// LatencySample bounds how many of the latest deliveries Stats measures
// its latency percentiles over.
const LatencySample = 10000

// CounterKeyReplays names the running count of key replays.
const CounterKeyReplays = "key_replays"

// StateCount is the number of rows of one identity in one state.
type StateCount struct {
	Identity string      `json:"identity"`
	State    state.State `json:"state"`
	N        int         `json:"n"`
}

// PurgeParams says what MessagePurge drops.
type PurgeParams struct {
	Before  time.Time // rows created before this
	Purpose string    // only this purpose ("" for all)
	Tenant  string    // only this tenant ("" for all)
	DryRun  bool
}

// Pacing is one identity's limits, shared by every drain.
type Pacing struct {
	// Spacing is the least time between two calls of the identity
	// (1/rate); zero means unlimited.
	Spacing time.Duration
	// PerRecipient is the least time between two calls to one recipient;
	// zero means unlimited.
	PerRecipient time.Duration
}

// ClaimParams says what a drain may claim.
type ClaimParams struct {
	Owner    string        // the lease owner: unique per drain process
	LeaseFor time.Duration // how long the lease lasts
	Limit    int           // at most this many rows
	// Lane restricts claims to one lane ("" for both); Identities to these
	// identities (empty for all).
	Lane       string
	Identities []string
	// Pacing per identity; an identity without an entry is unpaced.
	Pacing map[string]Pacing
	// DailyRecipients is each identity's daily unique-recipient limit
	// (DailyLimiter); an identity without a positive entry has none. A
	// row to a recipient its identity has not messaged within
	// DailyWindow, once the identity's count has reached its limit,
	// stays queued: its next_attempt_at moves to when a place may free,
	// and its last_error says so (DailyHeldError).
	DailyRecipients map[string]int
	// Horizon is how far ahead of now a slot may lie for the row to be
	// claimed (the drain waits for it); zero means one second.
	Horizon time.Duration
	Now     time.Time // zero: the store's clock
}

// Claimed is a row leased to a drain, with the time its call may start.
type Claimed struct {
	Message
	SlotAt time.Time
}

// IdentityState is an identity as the store sees it.
type IdentityState struct {
	Name     string     `json:"name"`
	Paused   bool       `json:"paused"`
	Reason   string     `json:"paused_reason"`
	PausedAt *time.Time `json:"paused_at"`
	Queued   int        `json:"queued"`
	Sending  int        `json:"sending"`
	Unknown  int        `json:"unknown"`
}

// Errors stores return. Match with errors.Is / errors.As.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("idempotency key reused with a different body")
	ErrStale        = errors.New("the row changed since it was read")
	ErrLeaseLive    = errors.New("a drain still holds the row's lease")
	ErrSchemaTooNew = errors.New("the database schema is newer than this msgq")
)

// ConflictError is an idempotency key that exists with a different body.
type ConflictError struct {
	Tenant     string
	Key        string
	ExistingID string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("key %q is already used by message %s with a different body", e.Key, e.ExistingID)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// InvalidError is input the store refuses before writing anything.
type InvalidError struct {
	Field string
	Msg   string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Lanes. The reply lane (answers to a customer who just wrote) is drained
// before the bulk lane.
const (
	LaneReply = "reply"
	LaneBulk  = "bulk"
)

// Channels msgq sends on.
const (
	ChannelWhatsApp = "whatsapp"
	ChannelSMS      = "sms"
)

// DefaultTenant is the tenant of rows enqueued without one.
const DefaultTenant = "default"

// Payload is what is sent: a template with its language and parameters, or
// free-form text; plus an optional fallback template for when free-form text
// cannot be sent (a closed customer-service window).
type Payload struct {
	Template string   `json:"template,omitempty"`
	Lang     string   `json:"lang,omitempty"`
	Params   []string `json:"params,omitempty"`
	Text     string   `json:"text,omitempty"`
	// Subject and HTML are an email's subject line and optional HTML
	// alternative to Text (the email channel; internal/provider/smtp).
	Subject          string `json:"subject,omitempty"`
	HTML             string `json:"html,omitempty"`
	FallbackTemplate string `json:"fallback_template,omitempty"`
	// FallbackParams are the fallback template's parameters, in order.
	FallbackParams []string `json:"fallback_params,omitempty"`
	// QuietHours is the send's own quiet hours: "" for its identity's,
	// "off" for none, or a window "HH:MM-HH:MM" (internal/quiet). It is
	// when the message may go, not what it says: not part of the body
	// hash.
	QuietHours string `json:"quiet_hours,omitempty"`
}

// EnqueueParams is one logical send to create.
type EnqueueParams struct {
	Tenant     string
	Key        string
	To         string // E.164, normalised by the caller
	Channel    string
	Identity   string
	Purpose    string
	TriggerRef string
	Lane       string
	Payload    Payload
	NotBefore  time.Time // zero: now
	ExpiresAt  time.Time // zero: never
	// NotBeforeIn and ExpiresIn say the same as NotBefore and ExpiresAt
	// as a delay from the moment of the enqueue (what a user types:
	// "--not-before 5m", "--expires-in 10m"). The store resolves them on
	// its own clock (PostgreSQL: the database server's), so a sender whose
	// host clock is wrong still schedules on the clock every drain shares.
	// Each, when not zero, replaces its absolute twin.
	NotBeforeIn time.Duration
	ExpiresIn   time.Duration
	ResendOf    string
}

// EnqueueResult is the row a MessageEnqueue produced or found.
type EnqueueResult struct {
	Message  *Message
	Replayed bool
	// Revived says the key's row had been refused for a policy reason
	// before any call (failed, opted_out) and the condition has lifted:
	// the row itself is queued again (internal/state's revive), not a new
	// one, and Message is it as revived.
	Revived bool
	Err     error // MessageEnqueueMany only: this item's own error
}

// Message is one logical send. Field names in JSON are a contract scripts
// rely on: add, never rename.
type Message struct {
	ID            string       `json:"id"`
	Tenant        string       `json:"tenant"`
	Key           string       `json:"key"`
	BodyHash      string       `json:"body_hash"`
	To            string       `json:"to"`
	Channel       string       `json:"channel"`
	Identity      string       `json:"identity"`
	Purpose       string       `json:"purpose"`
	TriggerRef    string       `json:"ref"`
	Lane          string       `json:"lane"`
	Payload       *Payload     `json:"payload"` // nil once purged
	State         state.State  `json:"state"`
	Reason        state.Reason `json:"reason,omitempty"`
	Attempts      int          `json:"attempts"`
	NextAttemptAt time.Time    `json:"next_attempt_at"`
	ExpiresAt     *time.Time   `json:"expires_at"`
	LeaseOwner    string       `json:"lease_owner,omitempty"`
	LeaseUntil    *time.Time   `json:"lease_until,omitempty"`
	ProviderID    string       `json:"provider_id"`
	LastError     string       `json:"last_error"`
	// MaybeSent says an earlier call's answer was lost: the message may
	// have reached the phone even though the row is queued again.
	MaybeSent  bool      `json:"maybe_sent"`
	ResendOf   string    `json:"resend_of,omitempty"`
	Resolution string    `json:"resolution,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Sources of state changes, recorded in history.
const (
	SourceSend      = "send"
	SourceDrain     = "drain"
	SourceWebhook   = "webhook"
	SourceReconcile = "reconcile"
	SourceOperator  = "operator"
	// SourceSQL is PostgreSQL's enqueue(), taking a row in; SourceAdmission
	// the Go admission deciding it (docs/sql-enqueue.md).
	SourceSQL       = "sql"
	SourceAdmission = "admission"
)

// HistoryEntry is one state change (or one piece of evidence recorded but
// not applied, with Applied false).
type HistoryEntry struct {
	MessageID string       `json:"message_id"`
	From      state.State  `json:"from"`
	To        state.State  `json:"to"`
	Reason    state.Reason `json:"reason,omitempty"`
	Event     string       `json:"event"`
	Applied   bool         `json:"applied"`
	Source    string       `json:"source"`
	Detail    string       `json:"detail"`
	At        time.Time    `json:"at"`
}

// Attempt is one provider call.
type Attempt struct {
	MessageID       string        `json:"message_id"`
	Number          int           `json:"number"`
	StartedAt       time.Time     `json:"started_at"`
	FinishedAt      time.Time     `json:"finished_at"`
	Class           string        `json:"class"`
	HTTPStatus      int           `json:"http_status"`
	ProviderCode    string        `json:"provider_code"`
	ProviderSubcode string        `json:"provider_subcode"`
	RawError        string        `json:"raw_error"`
	Latency         time.Duration `json:"latency_ns"`
}

// TransitionParams is one event to apply to one row.
type TransitionParams struct {
	ID     string
	From   state.State // the state the caller read; the write is conditional on it
	Event  state.Event
	Source string
	Detail string
	// LeaseOwner, when set, makes the write conditional on the caller still
	// holding the row's lease.
	LeaseOwner string
	// LeaseUntil, with LeaseOwner, narrows that to the one lease the
	// caller was given (Claimed.LeaseUntil): the same drain may claim the
	// row again after reconcile queued it, and an answer from the first
	// claim must not be taken for the second's.
	LeaseUntil time.Time
	// KeepIfStale keeps the caller's word when the write loses because
	// the row moved on (ErrStale): the attempt, when set, and a history
	// entry (applied false, from and to the row's current state, detail
	// StaleDetail) are written instead of the change, and the error is
	// still ErrStale. A drain's late answer is evidence an operator must
	// see, never dropped.
	KeepIfStale bool
	// Now is the time of the change; zero means the store's clock.
	Now time.Time
	// NextAttemptAt schedules the row when the event puts it back in queued.
	NextAttemptAt time.Time
	// NextAttemptIn, when NextAttemptAt is zero, schedules the row that
	// long after the store's clock at the write (a retry's backoff): a
	// delay, not a time, so that a drain whose host clock is off still
	// schedules on the clock every drain shares.
	NextAttemptIn time.Duration
	// MaybeSent, when true, marks the row as possibly delivered (see
	// Message.MaybeSent); it is never cleared.
	MaybeSent bool
	// NoCall gives back the attempt the claim counted: the row leaves
	// sending without a provider call (held, or the drain stopped first).
	NoCall bool
	// ProviderID and LastError, when set, are recorded on the row.
	ProviderID string
	LastError  string
	Resolution string
	// Attempt, when set, is written in the same transaction.
	Attempt *Attempt
}

// TransitionResult is one item of MessageTransitionMany.
type TransitionResult struct {
	State state.State // the row's state after the item (when Err is nil)
	Err   error
}

// IsItemError says err belongs to one transition (the row, the machine or
// the caller's parameters), not to the database: a batch goes on past it.
func IsItemError(err error) bool {
	var ie *InvalidError
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) || errors.Is(err, ErrLeaseLive) ||
		errors.Is(err, state.ErrRefused) || errors.As(err, &ie)
}

// ListParams filters MessageList. Zero values mean "any".
type ListParams struct {
	Tenant    string
	State     state.State
	To        string
	Purpose   string
	KeyPrefix string
	ResendOf  string    // resends of this message id
	Since     time.Time // created at or after
	// Before pages: only rows older than the row with this id (ids are in
	// creation order), so a next page starts after the last row shown.
	Before string
	Limit  int // 0: DefaultListLimit
}

// DefaultListLimit bounds a list without --limit.
const DefaultListLimit = 100

// Timestamp resolution every store keeps (PostgreSQL's timestamptz holds
// microseconds); the conformance suite compares times at this resolution.
const Resolution = time.Microsecond
