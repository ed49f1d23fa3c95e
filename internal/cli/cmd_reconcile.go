package cli

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
)

type reconcileOptions struct {
	dryRun           bool
	failIfUnresolved bool
	identity         string
	limit            int
	callTimeout      time.Duration
	tenant           string // bound to the tenant setting (flag > env > config)
}

func (o *reconcileOptions) Validate() error {
	switch {
	case o.limit <= 0:
		return usagef("--limit must be positive")
	case o.callTimeout <= 0:
		return usagef("--call-timeout must be positive")
	}
	return nil
}

func newReconcileCmd(a *app) *cobra.Command {
	o := &reconcileOptions{}
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Apply the evidence there is to uncertain messages; print what changed and what is left for a person",
		Long: `Settle what can be settled without a person, then list what cannot:

  0. Webhook evidence: stored deliveries not processed yet, and statuses parked
     until a message had their provider id, are applied first (source
     "webhook"); see msgq webhook. Skipped with --dry-run.
  1. Expired leases: a sending row whose drain vanished mid-call (its lease
     ended at least ` + store.TakeoverMargin.String() + ` ago: the takeover margin, so that a drain which checked
     its lease just before the end is done calling; see msgq drain --help) is
     never sent again blindly. When its identity's provider
     deduplicates by key (http, sim) it is queued again with the same key (the
     provider replays rather than delivers twice) and flagged maybe_sent;
     otherwise (whatsapp) it becomes unknown. A row whose identity is not in the
     config is treated as not deduplicating.
  2. Look-ups: each unknown row with a provider id whose provider can look a
     message up (http) is asked about; sent, delivered, read and failed are
     applied as evidence, which only ever moves a row forward.

Every change is written through the state machine, with source "reconcile" and
the reason in the history. The first table is what changed (a row may change
twice: sending -> unknown -> sent); the second is what is still for a person:
the unknown rows, to settle with msgq resolve or msgq resend. -o json prints
{"dry_run", "changed": [...], "unresolved": [...]}; a summary goes to stderr.

--dry-run writes nothing and prints the same (it still asks providers: a
look-up is a read). --fail-if-unresolved exits 4 when anything is left for a
person, for cron.

` + exitStatusHelp,
		Example: `  msgq reconcile
  msgq reconcile --dry-run -o json
  msgq reconcile --identity shop --fail-if-unresolved`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return runReconcile(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.dryRun, "dry-run", false, "show what would change; write nothing")
	f.BoolVar(&o.failIfUnresolved, "fail-if-unresolved", false, "exit 4 when any message is left for a person")
	f.StringVar(&o.identity, "identity", "", "only rows of this sending identity")
	f.IntVar(&o.limit, "limit", 10000, "at most this many expired leases, and this many unknown rows, per run")
	f.DurationVar(&o.callTimeout, "call-timeout", 10*time.Second, "how long one provider look-up may take")
	f.StringVar(&o.tenant, "tenant", "", "tenant (default \"default\") [MSGQ_TENANT]")
	addClockWarnFlag(cmd)
	return cmd
}

// reconcileChange is one change reconcile made (or, with --dry-run, would
// make). Field names are a JSON contract.
type reconcileChange struct {
	ID       string       `json:"id"`
	Key      string       `json:"key"`
	Identity string       `json:"identity"`
	From     state.State  `json:"from"`
	To       state.State  `json:"to"`
	Reason   state.Reason `json:"reason,omitempty"`
	Event    string       `json:"event"`
	Why      string       `json:"why"`
}

// reconcileLeft is a row left for a person. Field names are a JSON
// contract.
type reconcileLeft struct {
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

type reconcileResult struct {
	DryRun     bool              `json:"dry_run"`
	Changed    []reconcileChange `json:"changed"`
	Unresolved []reconcileLeft   `json:"unresolved"`
}

// lookuper is a provider that can report a message's status by the
// provider's id (the http API's GET /v1/messages/{id}).
type lookuper interface {
	Lookup(ctx context.Context, providerID string) (status string, res provider.Result)
}

// reconcileBatch bounds one transaction of reconcile's writes.
const reconcileBatch = 256

// planned is one transition reconcile means to write, with what the
// report says of it.
type planned struct {
	params store.TransitionParams
	change reconcileChange
	row    store.StuckMessage
}

func runReconcile(ctx context.Context, a *app, o *reconcileOptions) error {
	warnAt, err := a.cfg.clockWarn()
	if err != nil {
		return err
	}
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	// Measured once, at the start (a run is short; a long one measures
	// again every minute): the takeovers below are decided on the store's
	// clock, but a host whose clock is off is reported and recorded.
	clk := newClockWatch(a, st, "reconcile", "", warnAt)
	clk.noRecord = o.dryRun
	cctx, stopClock := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClock()
	clk.start(cctx)
	// 0. Webhook evidence first (docs/webhooks.md): deliveries stored but not
	// yet processed, and statuses parked until their row's provider id
	// was known. What they settle needs no look-up and no person. With
	// --dry-run nothing is processed; the parked count is in msgq stats.
	var fromWebhooks []reconcileChange
	if !o.dryRun {
		p := &webhook.Processor{Store: st, PhoneNumberIDs: phoneNumberIDs(a.cfg.Identities), Log: a.log}
		sum, err := p.Once(ctx)
		if err != nil {
			return err
		}
		for _, c := range sum.Changes {
			if c.Outcome != store.EvidenceApplied {
				continue
			}
			fromWebhooks = append(fromWebhooks, reconcileChange{ID: c.MessageID, From: c.From, To: c.To,
				Event: state.Event{Kind: state.Evidence, Status: c.Status}.String(), Why: "webhook: " + c.Detail})
		}
		if sum.Parked > 0 {
			fmt.Fprintf(a.ios.Err, "reconcile: %d webhook statuses are parked: no message has their provider id yet\n", sum.Parked)
		}
	}
	// Leases are taken over on the store's clock (PostgreSQL: the
	// server's), the one they were written on, never this host's.
	now, err := st.ClockNow(ctx)
	if err != nil {
		return err
	}
	stuck := func(p store.StuckParams) ([]store.StuckMessage, error) {
		p.Tenant, p.Identity, p.Now, p.Limit = a.cfg.Tenant, o.identity, now, o.limit
		ms, err := st.MessageStuck(ctx, &p)
		if err == nil && len(ms) == o.limit {
			fmt.Fprintf(a.ios.Err, "reconcile: took the oldest %d %s rows (--limit); run again for the rest\n", o.limit, p.State)
		}
		return ms, err
	}
	expired, err := stuck(store.StuckParams{State: state.Sending, LeaseExpired: true})
	if err != nil {
		return err
	}
	unknown, err := stuck(store.StuckParams{State: state.Unknown})
	if err != nil {
		return err
	}

	// The providers of the identities whose rows are looked up, built
	// before anything is written. An identity whose token is not set here
	// is skipped with one warning: its rows are not looked up and stay for
	// a reconcile that has it (or a person). Expired leases need no token:
	// whether a provider deduplicates by key is a property of its kind.
	provs := map[string]provider.Provider{}
	var skipped []skippedIdentity
	seen := map[string]bool{}
	for _, m := range unknown {
		id, ok := a.cfg.Identities[m.Identity]
		if m.ProviderID == "" || !ok || seen[m.Identity] {
			continue
		}
		seen[m.Identity] = true
		if _, canLook := id.build("").(lookuper); !canLook {
			// Nothing to ask (WhatsApp has no look-up): no token needed,
			// and lookUp says so in the row's note.
			provs[m.Identity] = id.build("")
			continue
		}
		if miss := id.missingSendEnv(); len(miss) > 0 {
			skipped = append(skipped, skippedIdentity{Name: m.Identity, Missing: miss})
			continue
		}
		p, err := id.provider()
		if err != nil {
			return err
		}
		provs[m.Identity] = p
	}
	sort.Slice(skipped, func(i, j int) bool { return skipped[i].Name < skipped[j].Name })
	warnSkipped(a, "reconcile", skipped, func(skippedIdentity) string {
		return "its unknown rows are not looked up"
	})
	lacking := map[string]bool{}
	for _, s := range skipped {
		lacking[s.Name] = true
	}

	res := &reconcileResult{DryRun: o.dryRun, Changed: append([]reconcileChange{}, fromWebhooks...), Unresolved: []reconcileLeft{}}
	type candidate struct {
		row  store.StuckMessage
		note string
	}
	var cands []candidate

	// 1. Expired leases: never sent again blindly.
	var leases []planned
	for _, m := range expired {
		leases = append(leases, leasePlan(m, a.cfg.Identities))
	}
	done, ferr := applyPlanned(ctx, a, st, leases, o.dryRun)
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
		return finishReconcile(a, o, res, ferr)
	}
	for _, m := range unknown {
		cands = append(cands, candidate{m, ""})
	}

	// 2. Look-ups, for the rows that can be looked up.
	var evidence []planned
	var left []candidate
	for _, c := range cands {
		var status state.State
		var why, note string
		if lacking[c.row.Identity] {
			note = fmt.Sprintf("identity %s's token is not set here: not looked up", c.row.Identity)
		} else {
			status, why, note = lookUp(ctx, c.row, provs, o.callTimeout)
		}
		if status == state.None {
			c.note = joinNotes(c.note, note)
			left = append(left, c)
			continue
		}
		ev := state.Event{Kind: state.Evidence, Status: status}
		r, err := state.Transition(state.Unknown, ev)
		if err != nil { // the machine takes every provider status from unknown
			return err
		}
		evidence = append(evidence, planned{
			params: store.TransitionParams{ID: c.row.ID, From: state.Unknown, Event: ev, Source: store.SourceReconcile, Detail: why},
			change: reconcileChange{ID: c.row.ID, Key: c.row.Key, Identity: c.row.Identity, From: state.Unknown, To: r.To,
				Reason: r.Reason, Event: ev.String(), Why: why},
			row: c.row,
		})
	}
	done, ferr = applyPlanned(ctx, a, st, evidence, o.dryRun)
	for _, p := range evidence[:done] {
		if p.change.From != "" {
			res.Changed = append(res.Changed, p.change)
		}
	}
	for _, c := range left {
		res.Unresolved = append(res.Unresolved, reconcileLeft{ID: c.row.ID, Key: c.row.Key, Identity: c.row.Identity,
			Age: max(0, now.Sub(c.row.UpdatedAt)), Attempts: c.row.Attempts, LastCode: c.row.LastCode, Note: c.note})
	}
	return finishReconcile(a, o, res, ferr)
}

// leasePlan decides what becomes of a sending row whose lease expired:
// queued again with the same key when its provider deduplicates by key,
// else unknown.
func leasePlan(m store.StuckMessage, ids map[string]*identity) planned {
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
	case id.dedupesByKey():
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
		change: reconcileChange{ID: m.ID, Key: m.Key, Identity: m.Identity, From: state.Sending, To: r.To, Reason: r.Reason,
			Event: ev.String(), Why: why},
		row: m,
	}
}

// applyPlanned writes ps through the state machine in batches (unless
// dryRun) and returns how many were dealt with. An item the store refuses
// (the row moved on meanwhile) is reported on stderr and its change
// cleared; a database error ends the run: the items before it are
// written, the rest are not.
func applyPlanned(ctx context.Context, a *app, st store.Store, ps []planned, dryRun bool) (int, error) {
	if dryRun {
		return len(ps), nil
	}
	for start := 0; start < len(ps); start += reconcileBatch {
		batch := ps[start:min(start+reconcileBatch, len(ps))]
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
				fmt.Fprintf(a.ios.Err, "reconcile: %s (%s) left alone: %s\n", p.row.Key, p.row.ID, oneLine(r.Err.Error()))
				p.change = reconcileChange{}
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
	l, ok := p.(lookuper)
	if !ok {
		return state.None, "", fmt.Sprintf("identity %s's provider cannot look a message up", m.Identity)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, res := l.Lookup(cctx, m.ProviderID)
	if res.Class != retry.Accepted {
		return state.None, "", "look-up failed: " + lookupFailure(res)
	}
	status = lookupStatus(raw)
	if status == state.None {
		return state.None, "", fmt.Sprintf("the provider reports %q, which settles nothing", raw)
	}
	why = fmt.Sprintf("provider look-up of %s: status %q", m.ProviderID, raw)
	if res.Code != "" {
		why += ", code " + res.Code
	}
	return status, why, ""
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

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// finishReconcile prints what reconcile did, then returns err, or exit 4
// for --fail-if-unresolved when anything is left for a person.
func finishReconcile(a *app, o *reconcileOptions, res *reconcileResult, err error) error {
	if perr := printReconcile(a, res); perr != nil && err == nil {
		err = perr
	}
	suffix := ""
	if o.dryRun {
		suffix = " (dry run: nothing written)"
	}
	verb := "changed"
	if o.dryRun {
		verb = "would change"
	}
	fmt.Fprintf(a.ios.Err, "reconcile: %s %d, left for a person %d%s\n", verb, len(res.Changed), len(res.Unresolved), suffix)
	if err != nil {
		return err
	}
	if o.failIfUnresolved && len(res.Unresolved) > 0 {
		return &exitError{code: ExitFound, msg: fmt.Sprintf("%d message(s) left for a person (--fail-if-unresolved)", len(res.Unresolved))}
	}
	return nil
}

func printReconcile(a *app, res *reconcileResult) error {
	w := a.ios.Out
	if a.cfg.Output == outJSON {
		return printJSON(w, res)
	}
	title := "CHANGED"
	if res.DryRun {
		title = "WOULD CHANGE (dry run)"
	}
	fmt.Fprintln(w, title)
	if len(res.Changed) == 0 {
		fmt.Fprintln(w, "none")
	} else {
		rows := make([][]string, 0, len(res.Changed))
		for _, c := range res.Changed {
			to := string(c.To)
			if c.Reason != state.NoReason {
				to += "(" + string(c.Reason) + ")"
			}
			rows = append(rows, []string{c.ID, c.Key, string(c.From), to, c.Why})
		}
		if err := printTable(w, []string{"ID", "KEY", "FROM", "TO", "WHY"}, rows); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nFOR A PERSON (msgq resolve ID --as sent|failed --note ..., or msgq resend)")
	if len(res.Unresolved) == 0 {
		fmt.Fprintln(w, "none")
		return nil
	}
	rows := make([][]string, 0, len(res.Unresolved))
	for _, l := range res.Unresolved {
		rows = append(rows, []string{l.ID, l.Key, l.Identity, ageLabel(l.Age), strconv.Itoa(l.Attempts), orDash(l.LastCode), l.Note})
	}
	return printTable(w, []string{"ID", "KEY", "IDENTITY", "AGE", "ATTEMPTS", "LAST CODE", "NOTE"}, rows)
}
