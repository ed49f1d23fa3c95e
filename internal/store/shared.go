package store

import (
	"crypto/rand"
	"fmt"
	"io/fs"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/msgq/msgq/internal/state"
)

// This file holds what every store implementation does the same way, so
// that the SQLite and PostgreSQL stores differ only in their SQL.

// IDs makes message ids: ULIDs on the store's clock, so ids sort as rows
// were created. The entropy is the generator's own and monotonic: ids made
// in one millisecond by one store handle still sort in creation order (a
// process-wide source would be re-seeded by other handles' calls).
type IDs struct {
	mu      sync.Mutex
	entropy *ulid.MonotonicEntropy
}

// NewIDs returns a generator for one store handle.
func NewIDs() *IDs { return &IDs{entropy: ulid.Monotonic(rand.Reader, 0)} }

// New returns the next id at time now.
func (g *IDs) New(now time.Time) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return ulid.MustNew(ulid.Timestamp(now), g.entropy).String()
}

// IDBefore is the least id a row created at t can have: every row with a
// smaller id was created before t (ids are ULIDs on the store's clock, so
// the primary key orders rows by creation).
func IDBefore(t time.Time) string {
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(t)); err != nil {
		return ulid.ULID{}.String() // before 1970 or past 10889: no row
	}
	return id.String()
}

// NewMessage is the row an enqueue of p creates at now, before it is
// written: queued (through the state machine), scheduled at not_before or
// now, times at the stores' resolution.
func NewMessage(p *EnqueueParams, id string, now time.Time) *Message {
	res, err := state.Transition(state.None, state.Event{Kind: state.Enqueue})
	if err != nil {
		panic(err) // the machine always admits a new row
	}
	next := now
	if p.NotBefore.After(now) {
		next = p.NotBefore.UTC().Truncate(Resolution)
	}
	var exp *time.Time
	if !p.ExpiresAt.IsZero() {
		e := p.ExpiresAt.UTC().Truncate(Resolution)
		exp = &e
	}
	payload := p.Payload
	if len(payload.Params) == 0 {
		payload.Params = nil
	}
	return &Message{
		ID: id, Tenant: p.Tenant, Key: p.Key, BodyHash: p.BodyHash(), To: p.To,
		Channel: p.Channel, Identity: p.Identity, Purpose: p.Purpose, TriggerRef: p.TriggerRef,
		Lane: p.Lane, Payload: &payload, State: res.To, NextAttemptAt: next, ExpiresAt: exp,
		ResendOf: p.ResendOf, CreatedAt: now, UpdatedAt: now,
	}
}

// DefaultHorizon is how far ahead a pacing slot may lie for a claim to
// take the row, when ClaimParams.Horizon is zero.
const DefaultHorizon = time.Second

// Validate checks p as every store's MessageClaim does. Errors are
// *InvalidError.
func (p *ClaimParams) Validate() error {
	switch {
	case p.Owner == "":
		return &InvalidError{Field: "owner", Msg: "is required"}
	case p.LeaseFor <= 0:
		return &InvalidError{Field: "lease", Msg: "must be positive"}
	case p.Limit <= 0:
		return &InvalidError{Field: "limit", Msg: "must be positive"}
	case p.Lane != "" && p.Lane != LaneReply && p.Lane != LaneBulk:
		return &InvalidError{Field: "lane", Msg: fmt.Sprintf("must be reply or bulk (got %q)", p.Lane)}
	}
	return nil
}

// Window returns the claim's time (p.Now, else clock) at the stores'
// resolution, and its slot horizon.
func (p *ClaimParams) Window(clock func() time.Time) (now time.Time, horizon time.Duration) {
	now = p.Now
	if now.IsZero() {
		now = clock()
	}
	horizon = p.Horizon
	if horizon <= 0 {
		horizon = DefaultHorizon
	}
	return now.UTC().Truncate(Resolution), horizon
}

// IdentityTally gathers IdentityStates from a store's two reads: the
// pause records and the counts of in-flight states.
type IdentityTally map[string]*IdentityState

func (t IdentityTally) get(name string) *IdentityState {
	if t[name] == nil {
		t[name] = &IdentityState{Name: name}
	}
	return t[name]
}

// Pause records an identity's pause state.
func (t IdentityTally) Pause(name string, paused bool, reason string, at *time.Time) {
	st := t.get(name)
	st.Paused, st.Reason, st.PausedAt = paused, reason, at
}

// Count records how many of an identity's rows are in a state (queued,
// sending and unknown are kept; others are ignored).
func (t IdentityTally) Count(name, st string, n int) {
	switch is := t.get(name); state.State(st) {
	case state.Queued:
		is.Queued = n
	case state.Sending:
		is.Sending = n
	case state.Unknown:
		is.Unknown = n
	}
}

// States returns the tally by name.
func (t IdentityTally) States() []IdentityState {
	out := make([]IdentityState, 0, len(t))
	for _, st := range t {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Migration is one versioned schema change, embedded in a store.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// ParseMigrations reads dir of fsys: files named VERSION_description.sql,
// returned in version order.
func ParseMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range ents {
		n, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(n)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a version number", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{v, e.Name(), string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// NeedsExpiredLease says an event may move a sending row only once its
// lease is over (LeaseOver; ErrLeaseLive otherwise): an operator's verdict
// and reconcile's takeovers are for rows whose drain vanished, and a live
// lease means a drain still owns the answer. The machine cannot see
// leases; the stores check this.
func NeedsExpiredLease(k state.Kind) bool {
	return k == state.Resolve || k == state.LeaseExpired || k == state.LeaseRequeue
}

// TakeoverMargin is how long after its lease_until a sending row still
// belongs to its drain: reconcile, an operator's verdict and msgq stuck's
// "expired" all wait this long past the lease's end before they take the
// row over.
//
// A drain starts a call only while its lease, measured on its own
// monotonic and wall clocks from before it asked for the claim, has the
// call's whole timeout plus a margin left (internal/drain), so every call
// it makes is cut off before lease_until. This margin covers what that
// measurement cannot see from the other side: a holder's call cut off
// late by a loaded or briefly stalled host (a second or two), and the
// offset between the holder's clock and the clock of the host taking
// over, which NTP keeps to milliseconds and which past 2 s is a fault to
// fix. 5 s covers both with room to spare; it is a constant, not a
// setting, because every process on every host must wait the same.
const TakeoverMargin = 5 * time.Second

// LeaseOver says a lease that ends at until may be taken over at now: it
// ended TakeoverMargin ago or more.
func LeaseOver(until, now time.Time) bool { return !now.Before(until.Add(TakeoverMargin)) }

// LeaseLiveError is the ErrLeaseLive of a takeover tried too early.
func LeaseLiveError(id, owner string, until time.Time) error {
	return fmt.Errorf("%w: message %s is leased by %s until %s (taken over from %s: lease end + %s margin)", ErrLeaseLive, id, owner,
		until.UTC().Format(time.RFC3339), until.Add(TakeoverMargin).UTC().Format(time.RFC3339), TakeoverMargin)
}

// LeaseMatches says a row's current lease (owner, until) is the one p was
// made under: the same owner and, when p names it, the same lease_until.
// A later claim of the row by the same drain (after reconcile queued it
// again) is another lease: an answer from the first must not land on it.
func (p *TransitionParams) LeaseMatches(owner string, until *time.Time) bool {
	if p.LeaseOwner == "" {
		return true
	}
	if owner != p.LeaseOwner {
		return false
	}
	if p.LeaseUntil.IsZero() {
		return true
	}
	return until != nil && until.UTC().Truncate(Resolution).Equal(p.LeaseUntil.UTC().Truncate(Resolution))
}

// StaleDetail is the history detail of a transition kept as evidence
// (TransitionParams.KeepIfStale) on a row that moved on: the row's state
// and lease now, then the caller's own detail.
func StaleDetail(p *TransitionParams, cur state.State, owner string, until *time.Time) string {
	now := string(cur)
	switch {
	case owner != "" && owner == p.LeaseOwner:
		now += " under a later lease of the same drain"
	case owner != "":
		now += ", leased by " + owner
	}
	who := "the caller"
	if p.LeaseOwner != "" {
		who = p.LeaseOwner
	}
	return fmt.Sprintf("not applied: the row moved on before %s recorded this (it is %s): %s", who, now, p.Detail)
}

// PastDeadline says whether m is an uncertain row (unknown) whose
// deadline (expires_at; a challenge step's is its challenge's) has passed
// at now. It still needs a person: nobody knows whether it reached the
// customer until evidence or an operator says (reconcile, resolve), so
// stuck keeps listing it. But a resend would arrive after the deadline,
// too late to be of use (a verification code is worthless then), so none
// is offered.
func (m *Message) PastDeadline(now time.Time) bool {
	return m.State == state.Unknown && m.ExpiresAt != nil && !now.Before(*m.ExpiresAt)
}

// Validate checks a stuck filter.
func (p *StuckParams) Validate() error {
	switch {
	case p.OlderThan < 0:
		return &InvalidError{Field: "older_than", Msg: "cannot be negative"}
	case p.State != state.None && p.State != state.Sending && p.State != state.Unknown:
		return &InvalidError{Field: "state", Msg: fmt.Sprintf("must be sending or unknown (got %q)", p.State)}
	}
	return nil
}

// Percentile returns the q-quantile (0..1) of sorted durations by the
// nearest-rank method, or zero for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// DefaultStatsWindow is the span of Stats' recent figures.
const DefaultStatsWindow = time.Hour
