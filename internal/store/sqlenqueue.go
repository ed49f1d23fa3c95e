package store

import (
	"context"
	"strings"
	"time"
)

// SQLIdentity is an identity name PostgreSQL's enqueue() accepts
// (docs/sql-enqueue.md): the database does not read the config, so `msgq
// migrate` records the names. What an identity sends on and its limits
// stay the config's, which the admission reads.
type SQLIdentity struct {
	Name string
	// Default says it is the config's default_identity: enqueue() takes
	// it when the call names none.
	Default bool
}

// SQLEnqueuer is a store with an enqueue() function for applications to
// call inside their own transactions (PostgreSQL's; SQLite has none).
type SQLEnqueuer interface {
	// SQLIdentitiesRecord adds ids to the identity names enqueue()
	// accepts; names recorded before and missing from ids stay (another
	// host's config may define them). A Default among ids replaces the
	// recorded default. Errors: *InvalidError for an identity without a
	// name.
	SQLIdentitiesRecord(ctx context.Context, ids []SQLIdentity) error
	Intaker
}

// IntakeRow is a row enqueue() took in (state intake), as the admission
// reads it.
type IntakeRow struct {
	ID, Tenant, Key, Identity string
	// Input is the call's input as enqueue() recorded it: a JSON object
	// whose field names are internal/queue's Spec's, with not_before and
	// expires_at as absolute RFC 3339 times on the database's clock.
	Input     []byte
	CreatedAt time.Time
}

// IntakeDecision is the admission's verdict on an intake row.
type IntakeDecision struct {
	ID string
	// Params, when set, admits the row: it becomes this send, queued
	// (unless its deadline has passed by the store's clock: then it fails
	// as expired). Its tenant and key must be the row's.
	Params *EnqueueParams
	// Expired, when Params is nil, fails it as expired: its deadline
	// passed before it was admitted (by the admitting process's clock;
	// the row never goes out either way).
	Expired bool
	// Invalid, when Params is nil and not Expired, refuses it: the row
	// fails with reason invalid and this (the field error, verbatim) as
	// its last error.
	Invalid string
}

// IntakeResult counts what IntakeDecide wrote. A decision on a row that
// is no longer in intake (another process decided it first) is Skipped.
type IntakeResult struct {
	Admitted, Invalid, Expired, Skipped int
}

// Intaker is a store whose rows can arrive unchecked (PostgreSQL's
// enqueue()): the admission lists them and records its decisions, each
// through the state machine (take_in, admit, fail(invalid|expired)).
type Intaker interface {
	// IntakeList is up to limit rows in state intake of the given
	// identities, oldest first.
	IntakeList(ctx context.Context, identities []string, limit int) ([]IntakeRow, error)
	// IntakeDecide records decisions in one transaction, each only if its
	// row is still in intake.
	IntakeDecide(ctx context.Context, ds []IntakeDecision) (IntakeResult, error)
}

// IntakeHashPrefix starts the body hash of a row enqueue() took in until
// the admission gives it Go's (migrations/0026_sql_intake.sql): the same
// key sent by msgq send meanwhile is a conflict, never a replay.
const IntakeHashPrefix = "intake:"

// NeverAdmitted says m was taken in by enqueue() and never admitted
// (still in intake, or failed invalid or expired before its admission):
// its columns hold the caller's input as given, unchecked.
func NeverAdmitted(m *Message) bool { return strings.HasPrefix(m.BodyHash, IntakeHashPrefix) }
