// Package reconcile settles what can be settled of the uncertain messages
// without a person, and lists what cannot: webhook evidence first, then
// expired leases (never sent again blindly), then provider look-ups of
// unknown rows. Every change is written through the state machine, in
// batches, with source "reconcile". The msgq reconcile command is a shell
// around Run: flags, the clock check, and printing the Result.
package reconcile

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
)

// Identity is what reconcile needs to know of one configured sending
// identity. Each is called only when a row of the identity needs it.
type Identity struct {
	// Kind returns the identity's provider built without a token: enough
	// to know whether it deduplicates by key and whether it can look a
	// message up, never called.
	Kind func() provider.Provider
	// Missing names the environment variables (each with its config key)
	// that its provider's calls need and this process lacks.
	Missing func() []string
	// Provider builds the provider with its token, for look-ups.
	Provider func() (provider.Provider, error)
}

// Skipped is an identity whose rows are not looked up: the token its
// look-ups need is not set in this process.
type Skipped struct {
	Name    string
	Missing []string
}

// Config is one reconcile run.
type Config struct {
	Store store.Store
	// Tenant and Identity select the rows ("" Identity: every identity).
	Tenant   string
	Identity string
	// Limit bounds the expired leases, and the unknown rows, taken per run
	// (the oldest first).
	Limit int
	// CallTimeout bounds one provider look-up.
	CallTimeout time.Duration
	// DryRun writes nothing and reports what would change (look-ups are
	// still made: a look-up is a read).
	DryRun bool
	// Identities are the configured identities by name. A row whose
	// identity is not here is treated as not deduplicating by key and is
	// not looked up.
	Identities map[string]*Identity
	// Webhooks, when set, applies the stored webhook evidence first
	// (skipped with DryRun).
	Webhooks *webhook.Processor
	// Notes receives one-line diagnostics (a --limit reached, parked
	// statuses, a row that moved on meanwhile); nil: discarded.
	Notes io.Writer
	// OnSkipped, when set, is told which identities are skipped for a
	// missing token, before anything is written.
	OnSkipped func([]Skipped)
}

// Change is one change reconcile made (or, with DryRun, would make).
// Field names are a JSON contract (docs/json.md).
type Change struct {
	ID       string       `json:"id"`
	Key      string       `json:"key"`
	Identity string       `json:"identity"`
	From     state.State  `json:"from"`
	To       state.State  `json:"to"`
	Reason   state.Reason `json:"reason,omitempty"`
	Event    string       `json:"event"`
	Why      string       `json:"why"`
}

// Left is a row left for a person. Field names are a JSON contract.
type Left struct {
	ID       string `json:"id"`
	Key      string `json:"key"`
	Identity string `json:"identity"`
	// Age is the time since the row entered unknown (for a row reconcile
	// just made unknown: since its claim, when the call may have gone out).
	Age      time.Duration `json:"age_ns"`
	Attempts int           `json:"attempts"`
	LastCode string        `json:"last_code"`
	// Note says why reconcile could not settle it.
	Note string `json:"note"`
}

// Result is what a run changed and what it left for a person. Field
// names are a JSON contract.
type Result struct {
	DryRun     bool     `json:"dry_run"`
	Changed    []Change `json:"changed"`
	Unresolved []Left   `json:"unresolved"`
}

// Lookuper is a provider that can report a message's status by the
// provider's id (the http API's GET /v1/messages/{id}): a kind's optional
// look-up, declared with the kinds (provider.Lookuper).
type Lookuper = provider.Lookuper

// candidate is an unknown row reconcile asks about, with what it says of
// the row so far.
type candidate struct {
	row  store.StuckMessage
	note string
}

// outcome is what asking about one row found: evidence to apply (status
// not state.None, with the provider id to record when a search found it,
// and the history detail), or a note saying why there is none.
type outcome struct {
	status         state.State
	pid, why, note string
}

// batchSize bounds one transaction of reconcile's writes.
const batchSize = 256

// planned is one transition reconcile means to write, with what the
// report says of it.
type planned struct {
	params store.TransitionParams
	change Change
	row    store.StuckMessage
}

// Run reconciles once. An error from a write returns, with the error,
// the Result of what was done by then (the batches before the failed one
// are committed), so that the caller can still report it; an error before
// anything was written returns the zero Result (Changed nil).
func Run(ctx context.Context, cfg Config) (Result, error) {
	notes := cfg.Notes
	if notes == nil {
		notes = io.Discard
	}
	st := cfg.Store
	// 0. Webhook evidence first (docs/webhooks.md): deliveries stored but not
	// yet processed, and statuses parked until their row's provider id
	// was known. What they settle needs no look-up and no person. With
	// DryRun nothing is processed; the parked count is in msgq stats.
	var fromWebhooks []Change
	if !cfg.DryRun && cfg.Webhooks != nil {
		sum, err := cfg.Webhooks.Once(ctx)
		if err != nil {
			return Result{}, err
		}
		for _, c := range sum.Changes {
			if c.Outcome != store.EvidenceApplied {
				continue
			}
			fromWebhooks = append(fromWebhooks, Change{ID: c.MessageID, From: c.From, To: c.To,
				Event: state.Event{Kind: state.Evidence, Status: c.Status}.String(), Why: "webhook: " + c.Detail})
		}
		if sum.Parked > 0 {
			fmt.Fprintf(notes, "reconcile: %d webhook statuses are parked: no message has their provider id yet\n", sum.Parked)
		}
	}
	// Leases are taken over on the store's clock (PostgreSQL: the
	// server's), the one they were written on, never this host's.
	now, err := st.ClockNow(ctx)
	if err != nil {
		return Result{}, err
	}
	stuck := func(p store.StuckParams) ([]store.StuckMessage, error) {
		p.Tenant, p.Identity, p.Now, p.Limit = cfg.Tenant, cfg.Identity, now, cfg.Limit
		ms, err := st.MessageStuck(ctx, &p)
		if err == nil && len(ms) == cfg.Limit {
			fmt.Fprintf(notes, "reconcile: took the oldest %d %s rows (--limit); run again for the rest\n", cfg.Limit, p.State)
		}
		return ms, err
	}
	expired, err := stuck(store.StuckParams{State: state.Sending, LeaseExpired: true})
	if err != nil {
		return Result{}, err
	}
	unknown, err := stuck(store.StuckParams{State: state.Unknown})
	if err != nil {
		return Result{}, err
	}

	// The providers of the identities whose rows are looked up, built
	// before anything is written. An identity whose token is not set here
	// is skipped with one warning: its rows are not looked up and stay for
	// a reconcile that has it (or a person). Expired leases need no token:
	// whether a provider deduplicates by key is a property of its kind.
	provs := map[string]provider.Provider{}
	var skipped []Skipped
	seen := map[string]bool{}
	needs := append([]store.StuckMessage{}, unknown...)
	for _, m := range expired {
		if id, ok := cfg.Identities[m.Identity]; ok && !id.Kind().Idempotent() {
			needs = append(needs, m) // it becomes unknown below, and is looked for
		}
	}
	for _, m := range needs {
		id, ok := cfg.Identities[m.Identity]
		if !ok || seen[m.Identity] {
			continue
		}
		k := id.Kind()
		if !asks(k, m) {
			// Nothing to ask about this row (WhatsApp has no look-up; a
			// row without a provider id and a provider that cannot find
			// one): no token needed, and the row's note says so.
			if _, ok := provs[m.Identity]; !ok {
				provs[m.Identity] = k
			}
			continue
		}
		seen[m.Identity] = true
		if miss := id.Missing(); len(miss) > 0 {
			skipped = append(skipped, Skipped{Name: m.Identity, Missing: miss})
			delete(provs, m.Identity)
			continue
		}
		p, err := id.Provider()
		if err != nil {
			return Result{}, err
		}
		provs[m.Identity] = p
	}
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Name < skipped[j].Name })
	if cfg.OnSkipped != nil {
		cfg.OnSkipped(skipped)
	}
	lacking := map[string]bool{}
	for _, s := range skipped {
		lacking[s.Name] = true
	}

	res := Result{DryRun: cfg.DryRun, Changed: append([]Change{}, fromWebhooks...), Unresolved: []Left{}}
	var cands []candidate

	// 1. Expired leases: never sent again blindly.
	var leases []planned
	for _, m := range expired {
		leases = append(leases, leasePlan(m, cfg.Identities))
	}
	done, ferr := applyPlanned(ctx, notes, st, leases, cfg.DryRun)
	for _, p := range leases[:done] {
		if p.change.From == "" {
			continue // skipped: the row moved on
		}
		res.Changed = append(res.Changed, p.change)
		if p.change.To == state.Unknown {
			row := p.row
			row.State = state.Unknown
			cands = append(cands, candidate{row, "its drain vanished mid-call: the call may have reached the phone"})
		}
	}
	if ferr != nil {
		return res, ferr
	}
	for _, m := range unknown {
		cands = append(cands, candidate{m, ""})
	}

	// 2. Look-ups, for the rows that can be looked up, and searches for
	// those without a provider id. A search is decided only once every
	// row's search is in: a message two rows of this run could each be is
	// neither's (rivals).
	outs := make([]outcome, len(cands))
	searches := make([]*search, len(cands))
	for i, c := range cands {
		f, finds := provs[c.row.Identity].(Finder)
		switch {
		case lacking[c.row.Identity]:
			outs[i].note = fmt.Sprintf("identity %s's token is not set here: not looked up", c.row.Identity)
		case c.row.ProviderID == "" && finds:
			around, err := callTime(ctx, st, c.row)
			if err != nil {
				return res, err
			}
			searches[i], err = searchFor(ctx, st, c.row, f, around, cfg.CallTimeout)
			if err != nil {
				return res, err
			}
		default:
			outs[i].status, outs[i].why, outs[i].note = lookUp(ctx, c.row, provs, cfg.CallTimeout)
		}
	}
	rivals := rivalsOf(cands, searches)
	for i, s := range searches {
		if s != nil {
			outs[i] = decide(cands[i].row, s, rivals, provs[cands[i].row.Identity])
		}
	}
	var evidence []planned
	var left []candidate
	for i, c := range cands {
		o := outs[i]
		if o.status == state.None {
			c.note = joinNotes(c.note, o.note)
			left = append(left, c)
			continue
		}
		ev := state.Event{Kind: state.Evidence, Status: o.status}
		r, err := state.Transition(state.Unknown, ev)
		if err != nil { // the machine takes every provider status from unknown
			return Result{}, err
		}
		evidence = append(evidence, planned{
			params: store.TransitionParams{ID: c.row.ID, From: state.Unknown, Event: ev, Source: store.SourceReconcile, Detail: o.why,
				ProviderID: o.pid},
			change: Change{ID: c.row.ID, Key: c.row.Key, Identity: c.row.Identity, From: state.Unknown, To: r.To,
				Reason: r.Reason, Event: ev.String(), Why: o.why},
			row: c.row,
		})
	}
	done, ferr = applyPlanned(ctx, notes, st, evidence, cfg.DryRun)
	for _, p := range evidence[:done] {
		if p.change.From != "" {
			res.Changed = append(res.Changed, p.change)
		}
	}
	for _, c := range left {
		res.Unresolved = append(res.Unresolved, Left{ID: c.row.ID, Key: c.row.Key, Identity: c.row.Identity,
			Age: max(0, now.Sub(c.row.UpdatedAt)), Attempts: c.row.Attempts, LastCode: c.row.LastCode, Note: c.note})
	}
	// What is left for a person keeps reconcile's note on the row, for
	// msgq stuck to show; a note the row has already is not written again,
	// so a reconcile run from cron writes nothing while nothing changes.
	if ferr == nil && !cfg.DryRun {
		if err := keepNotes(ctx, st, left); err != nil {
			return res, err
		}
	}
	// Challenges last (docs/challenges.md): what was settled above may
	// complete one, or unblock or cancel its next step.
	if ferr == nil && !cfg.DryRun {
		if _, err := st.ChallengeTick(ctx, &store.TickParams{Source: store.SourceReconcile}); err != nil {
			return res, err
		}
	}
	return res, ferr
}

// stamp is how a time shows in a history detail, as in msgq's tables:
// UTC, second precision, RFC 3339.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// leasePlan decides what becomes of a sending row whose lease expired:
// queued again with the same key when its provider deduplicates by key,
// else unknown.
func leasePlan(m store.StuckMessage, ids map[string]*Identity) planned {
	lost := "lease expired"
	if m.LeaseOwner != "" {
		lost = "lease of " + m.LeaseOwner + " expired"
	}
	if m.LeaseUntil != nil {
		lost += " at " + stamp(*m.LeaseUntil)
	}
	ev := state.Event{Kind: state.LeaseExpired}
	var why string
	id := ids[m.Identity]
	switch {
	case id == nil:
		why = fmt.Sprintf("%s; identity %s is not in the config: treated as not deduplicating by key, so the call may have reached the phone", lost, m.Identity)
	case id.Kind().Idempotent():
		ev = state.Event{Kind: state.LeaseRequeue}
		why = fmt.Sprintf("%s; identity %s's provider deduplicates by key: queued again with the same key (maybe_sent)", lost, m.Identity)
	default:
		why = fmt.Sprintf("%s; identity %s's provider does not deduplicate by key, so the call may have reached the phone", lost, m.Identity)
	}
	r, err := state.Transition(state.Sending, ev)
	if err != nil {
		panic(err) // the machine takes both events from sending
	}
	return planned{
		params: store.TransitionParams{ID: m.ID, From: state.Sending, Event: ev, Source: store.SourceReconcile, Detail: why,
			MaybeSent: ev.Kind == state.LeaseRequeue},
		change: Change{ID: m.ID, Key: m.Key, Identity: m.Identity, From: state.Sending, To: r.To, Reason: r.Reason,
			Event: ev.String(), Why: why},
		row: m,
	}
}

// applyPlanned writes ps through the state machine in batches (unless
// dryRun) and returns how many were dealt with. An item the store refuses
// (the row moved on meanwhile) is reported in notes and its change
// cleared; a database error ends the run: the items before it are
// written, the rest are not.
func applyPlanned(ctx context.Context, notes io.Writer, st store.Store, ps []planned, dryRun bool) (int, error) {
	if dryRun {
		return len(ps), nil
	}
	for start := 0; start < len(ps); start += batchSize {
		batch := ps[start:min(start+batchSize, len(ps))]
		params := make([]store.TransitionParams, len(batch))
		for i := range batch {
			params[i] = batch[i].params
		}
		rs, err := st.MessageTransitionMany(ctx, params)
		if err != nil {
			return start, err
		}
		for i, r := range rs {
			if r.Err != nil {
				p := &batch[i]
				fmt.Fprintf(notes, "reconcile: %s (%s) left alone: %s\n", p.row.Key, p.row.ID, oneLine(r.Err.Error()))
				p.change = Change{}
			}
		}
	}
	return len(ps), nil
}

// lookUp asks the row's provider for its status. It returns the evidence
// to apply (state.None for none) with the history detail, or a note saying
// why there is none.
func lookUp(ctx context.Context, m store.StuckMessage, provs map[string]provider.Provider, timeout time.Duration) (status state.State, why, note string) {
	if m.ProviderID == "" {
		return state.None, "", "no provider id to look up"
	}
	p, ok := provs[m.Identity]
	if !ok {
		return state.None, "", fmt.Sprintf("identity %s is not in the config: no provider to ask", m.Identity)
	}
	l, ok := p.(Lookuper)
	if !ok {
		return state.None, "", fmt.Sprintf("identity %s's provider cannot look a message up", m.Identity)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, res := l.Lookup(cctx, m.ProviderID)
	if res.Class != retry.Accepted {
		return state.None, "", "look-up failed: " + lookupFailure(res)
	}
	status = statusOf(p, raw)
	if status == state.None {
		return state.None, "", fmt.Sprintf("the provider reports %q, which settles nothing", raw)
	}
	why = fmt.Sprintf("provider look-up of %s: status %q", m.ProviderID, raw)
	if res.Code != "" {
		why += ", code " + res.Code
	}
	return status, why, ""
}

// asks says whether reconcile has something to ask k about m: a look-up
// by its provider id, or a search for a row without one.
func asks(k provider.Provider, m store.StuckMessage) bool {
	if m.ProviderID != "" {
		_, ok := k.(Lookuper)
		return ok
	}
	_, ok := k.(Finder)
	return ok
}

// callTime is when m's call may have gone out, for a search: its last
// attempt's start, or for a row whose drain vanished mid-call (no
// attempt recorded) the time it was claimed.
func callTime(ctx context.Context, st store.Store, m store.StuckMessage) (time.Time, error) {
	as, err := st.MessageAttempts(ctx, m.ID)
	if err != nil {
		return time.Time{}, err
	}
	if len(as) > 0 {
		return as[len(as)-1].StartedAt, nil
	}
	return m.UpdatedAt, nil
}

// Finder is a provider that can find a message without its id (Twilio's
// list of messages to a recipient): a kind's optional search, declared
// with the kinds (provider.Finder).
type Finder = provider.Finder

// statusOf is the evidence a provider's reported status is: in its own
// words when it says what they mean (provider.StatusMapper), else in the
// http API's (lookupStatus).
func statusOf(p any, raw string) state.State {
	if sm, ok := p.(provider.StatusMapper); ok {
		if st, ok := sm.StatusState(raw); ok {
			return st
		}
		return state.None
	}
	return lookupStatus(raw)
}

// lookupStatus maps a provider's reported status to evidence: the http
// API's (and the simulator's) accepted, sent, delivered, read, failed, and
// the spellings other APIs use for the same (undelivered, played).
func lookupStatus(s string) state.State {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "accepted", "sent":
		return state.Sent
	case "delivered":
		return state.Delivered
	case "read", "played":
		return state.Read
	case "failed", "undelivered":
		return state.Failed
	}
	return state.None
}

// lookupFailure is a failed call's class, HTTP status and code, on one
// line.
func lookupFailure(r provider.Result) string {
	parts := []string{string(r.Class)}
	if r.HTTPStatus != 0 {
		parts = append(parts, "HTTP "+strconv.Itoa(r.HTTPStatus))
	}
	if r.Code != "" {
		parts = append(parts, "code "+r.Code)
	}
	if r.HTTPStatus == 0 && r.RawError != "" {
		parts = append(parts, oneLine(r.RawError))
	}
	return strings.Join(parts, ", ")
}

// oneLine keeps a provider's or the store's message to one line, as the
// notes and the report promise.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
