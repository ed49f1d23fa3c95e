package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/reconcile"
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
     message up (http, twilio) is asked about; sent, delivered, read and failed
     are applied as evidence, which only ever moves a row forward. An unknown
     row without one (its send's answer was lost) is searched for when its
     provider can list what it sent (twilio: the recipient's messages from the
     identity's sender, near the row's call, matched on msgq's id or the text).
     A listed message whose id another row of the identity already records
     (a second send of the same text, a resend) is that row's and is left
     out; only when exactly one is left, and no other row of the run could be
     it too, does it settle the row, which keeps the id found. No match, only
     other rows' messages, or several left, leave the row for a person with a
     note naming each message and its owner.

What is left for a person keeps reconcile's note on the row (written again
only when it changes; the row's state, age and history are untouched), and
msgq stuck shows it.

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

// runReconcile is the shell around reconcile.Run: the clock check, the
// identities as reconcile sees them, the warnings, and the report.
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
	// again every minute): the takeovers are decided on the store's
	// clock, but a host whose clock is off is reported and recorded.
	clk := newClockWatch(a, st, "reconcile", "", warnAt, o.dryRun)
	cctx, stopClock := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClock()
	clk.Start(cctx)
	cfg := reconcile.Config{
		Store: st, Tenant: a.cfg.Tenant, Identity: o.identity, Limit: o.limit, CallTimeout: o.callTimeout,
		DryRun: o.dryRun, Identities: reconcileIdentities(a.cfg.Identities), Notes: a.ios.Err,
		Webhooks: &webhook.Processor{Store: st, PhoneNumberIDs: phoneNumberIDs(a.cfg.Identities), Log: a.log},
		OnSkipped: func(ss []reconcile.Skipped) {
			skipped := make([]identities.Skipped, len(ss))
			for i, s := range ss {
				skipped[i] = identities.Skipped{Name: s.Name, Missing: s.Missing}
			}
			warnSkipped(a, "reconcile", skipped, func(identities.Skipped) string {
				return "its unknown rows are not looked up"
			})
		},
	}
	res, err := reconcile.Run(ctx, cfg)
	if err != nil && res.Changed == nil {
		// Nothing was done: no report, as for any command refused before
		// it started.
		return err
	}
	return finishReconcile(a, o, &res, err)
}

// reconcileIdentities is reconcile's view of the configured identities:
// each provider is built only when a row needs it.
func reconcileIdentities(ids map[string]*identities.Identity) map[string]*reconcile.Identity {
	out := make(map[string]*reconcile.Identity, len(ids))
	for n, id := range ids {
		out[n] = &reconcile.Identity{
			Kind:     id.Tokenless,
			Missing:  id.MissingSendEnv,
			Provider: id.Provider,
		}
	}
	return out
}

// finishReconcile prints what reconcile did, then returns err, or exit 4
// for --fail-if-unresolved when anything is left for a person.
func finishReconcile(a *app, o *reconcileOptions, res *reconcile.Result, err error) error {
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

func printReconcile(a *app, res *reconcile.Result) error {
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
