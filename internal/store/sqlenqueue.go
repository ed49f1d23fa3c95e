package store

import "context"

// SQLIdentity is an identity of a config as PostgreSQL's enqueue()
// function checks it (docs/sql-enqueue.md): the database does not read
// the config, so `msgq migrate` records what the CLI would check a send
// against.
type SQLIdentity struct {
	Name string
	// Channels are the channels it sends on, its default first.
	Channels []string
	// Default says it is the config's default_identity.
	Default bool
	// MaxSegments is its max_segments: enqueue() refuses an SMS text
	// of more segments (internal/sms counts them), as msgq send does.
	// 0: no limit.
	MaxSegments int
	// QuietWindow is its quiet_hours window as internal/quiet writes it
	// ("21:00-08:00"; "": none), QuietZone its quiet_zone's name, and
	// QuietExemptLanes and QuietExemptPurposes its quiet_exempt: enqueue()
	// applies them at enqueue as msgq send does (internal/quiet.Policy).
	QuietWindow         string
	QuietZone           string
	QuietExemptLanes    []string
	QuietExemptPurposes []string
}

// SQLEnqueuer is a store with an enqueue() function for applications to
// call inside their own transactions (PostgreSQL's; SQLite has none).
type SQLEnqueuer interface {
	// SQLIdentitiesRecord adds ids to the identities enqueue() accepts,
	// or updates their channels; identities recorded before and missing
	// from ids stay (another host's config may define them). A Default
	// among ids replaces the recorded default. Errors: *InvalidError for
	// an identity without a name or channels, a negative MaxSegments, or
	// a quiet zone the database does not know.
	SQLIdentitiesRecord(ctx context.Context, ids []SQLIdentity) error
}
