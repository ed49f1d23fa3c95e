package store

import (
	"context"
	"net/url"
	"strings"
	"time"
)

// Events is the outbox of status events to the applications' endpoints
// (docs/events.md). The stores' triggers write an event, in the
// transaction of the change itself, for every applied change of a message
// into sent, delivered, read, failed or unknown, and for every challenge
// that completes or expires, to each enabled endpoint of the tenant.
type Events interface {
	// EndpointAdd registers an endpoint. Errors: *InvalidError when p
	// fails Validate.
	EndpointAdd(ctx context.Context, p *Endpoint) error

	// EndpointList returns the endpoints of tenant ("" for all) with
	// their backlog, by tenant and creation.
	EndpointList(ctx context.Context, tenant string) ([]EndpointStatus, error)

	// EndpointRemove deletes an endpoint and its undelivered events.
	// Errors: ErrNotFound.
	EndpointRemove(ctx context.Context, id string) error

	// EndpointRetry puts an endpoint's dead events back to pending, due
	// now with their attempts reset, and returns how many. Errors:
	// ErrNotFound.
	EndpointRetry(ctx context.Context, id string) (int, error)

	// EventClaim leases up to p.Limit due events to p.Owner for
	// p.LeaseFor, counting an attempt on each, in one transaction that
	// commits before any delivery starts. Only the oldest undelivered,
	// not dead event of each endpoint and subject is claimable: a
	// message's events go out in order, one at a time. Errors:
	// *InvalidError for bad parameters.
	EventClaim(ctx context.Context, p *EventClaimParams) ([]EventDelivery, error)

	// EventRecord records one delivery's outcome and the endpoint's
	// health. A success is recorded whoever holds the event now (it was
	// delivered); a failure only under p.Owner's lease (ErrStale when
	// another worker took the event over).
	EventRecord(ctx context.Context, p *EventOutcome) error

	// EventList returns an endpoint's events ("" for all), oldest first.
	EventList(ctx context.Context, endpointID string, limit int) ([]Event, error)

	// EventPurge deletes the finished events (delivered or dead) written
	// before p.Before, of p.Tenant ("" for all) and, with p.Purpose, only
	// those of that purpose's messages, and returns how many (with
	// p.DryRun: would delete). Pending events are kept: they are still to
	// go out.
	EventPurge(ctx context.Context, p *PurgeParams) (int, error)

	// EventBacklog counts the undelivered events (the caller ages the
	// oldest pending one), for Stats.
	EventBacklog(ctx context.Context) (*EventBacklog, error)
}

// Endpoint is where a tenant's events go. Field names are a JSON contract.
type Endpoint struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	URL    string `json:"url"`
	// Secret signs the events (whsec_...); never printed after creation.
	Secret              string     `json:"-"`
	CreatedAt           time.Time  `json:"created_at"`
	DisabledAt          *time.Time `json:"disabled_at"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	LastError           string     `json:"last_error"`
	LastSuccessAt       *time.Time `json:"last_success_at"`
	LastFailureAt       *time.Time `json:"last_failure_at"`
}

// Validate checks an endpoint before it is written.
func (e *Endpoint) Validate() error {
	if e.Tenant == "" {
		e.Tenant = DefaultTenant
	}
	switch {
	case e.ID == "":
		return &InvalidError{Field: "id", Msg: "is required"}
	case !strings.HasPrefix(e.Secret, "whsec_"):
		return &InvalidError{Field: "secret", Msg: "must start with whsec_"}
	}
	u, err := url.Parse(e.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return &InvalidError{Field: "url", Msg: "must be an absolute http or https URL"}
	}
	return nil
}

// EndpointStatus is an endpoint with its backlog.
type EndpointStatus struct {
	Endpoint
	Pending   int `json:"pending"`
	Dead      int `json:"dead"`
	Delivered int `json:"delivered"`
	// OldestPendingAt is the creation time of its oldest pending event.
	OldestPendingAt *time.Time `json:"oldest_pending_at"`
}

// EventClaimParams says what a dispatcher may claim.
type EventClaimParams struct {
	Owner    string
	LeaseFor time.Duration
	Limit    int
	Now      time.Time // zero: the store's clock
}

// Validate checks the parameters.
func (p *EventClaimParams) Validate() error {
	switch {
	case p.Owner == "":
		return &InvalidError{Field: "owner", Msg: "is required"}
	case p.LeaseFor <= 0:
		return &InvalidError{Field: "lease_for", Msg: "must be positive"}
	case p.Limit <= 0:
		return &InvalidError{Field: "limit", Msg: "must be positive"}
	}
	return nil
}

// Event is one event to one endpoint. Field names are a JSON contract.
type Event struct {
	Seq         int64      `json:"seq"`
	ID          string     `json:"id"`
	EndpointID  string     `json:"endpoint_id"`
	Tenant      string     `json:"tenant"`
	Subject     string     `json:"subject"`
	MessageID   string     `json:"message_id"`
	ChallengeID string     `json:"challenge_id"`
	Type        string     `json:"type"`
	Data        string     `json:"data"` // the data object, JSON
	CreatedAt   time.Time  `json:"created_at"`
	Attempts    int        `json:"attempts"`
	NextAt      time.Time  `json:"next_at"`
	LeaseOwner  string     `json:"lease_owner"`
	LeaseUntil  *time.Time `json:"lease_until"`
	DeliveredAt *time.Time `json:"delivered_at"`
	DeadAt      *time.Time `json:"dead_at"`
	LastError   string     `json:"last_error"`
}

// EventDelivery is a claimed event with where it goes.
type EventDelivery struct {
	Event
	URL    string
	Secret string
}

// EventOutcome is what one delivery came to.
type EventOutcome struct {
	Seq        int64
	EndpointID string
	Owner      string
	Delivered  bool
	// Error says why a delivery failed (no secrets, no bodies beyond a
	// short excerpt); NextAt is when to try again, unless Dead.
	Error  string
	NextAt time.Time
	Dead   bool
	Now    time.Time // zero: the store's clock
}

// EventBacklog counts the outbox's undelivered events. Field names are a
// JSON contract.
type EventBacklog struct {
	Pending int `json:"pending"`
	Dead    int `json:"dead"`
	// OldestPendingAt is the creation time of the oldest pending event.
	OldestPendingAt *time.Time `json:"oldest_pending_at"`
}
