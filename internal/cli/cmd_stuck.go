package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type stuckOptions struct {
	olderThan time.Duration
	state     string
	identity  string
	purpose   string
	limit     int
	failIfAny bool
	tenant    string // bound to the tenant setting (flag > env > config)
}

func (o *stuckOptions) Validate() error {
	switch {
	case o.olderThan < 0:
		return usagef("--older-than cannot be negative (got %s)", o.olderThan)
	case o.state != "" && o.state != string(state.Sending) && o.state != string(state.Unknown):
		return usagef("--state must be sending or unknown (got %q)", o.state)
	case o.limit <= 0:
		return usagef("--limit must be positive")
	}
	return nil
}

func newStuckCmd(a *app) *cobra.Command {
	o := &stuckOptions{}
	cmd := &cobra.Command{
		Use:   "stuck",
		Short: "Messages that may have gone out and that nobody has settled, oldest first",
		Long: `List the messages a person must look at, oldest first:
  - sending rows whose lease is over (their drain vanished mid-call; listed at
    any age once the lease ended ` + store.TakeoverMargin.String() + ` ago, the takeover margin: until then a
    drain that checked its lease just before the end may still be calling),
    or whose claim is older than --older-than;
  - unknown rows (a call may have reached the phone) older than --older-than,
    also once their deadline (--expires-in; a challenge step's is its
    challenge's) has passed: nobody knows yet whether they reached the
    customer. Their STATE reads "unknown (past deadline)".
Age is the time since the row entered its state. RECONCILE NOTE is why the
latest msgq reconcile left the row for a person (for a search without a
provider id: the messages the provider lists that match it, and which other
rows own them), "-" before reconcile has seen it.

Next steps: msgq reconcile applies what evidence there is; msgq resolve records
a person's verdict; msgq resend sends again under a new key, except for a row
past its deadline: a resend would arrive too late (a verification code is
worthless by then), so find out and resolve it instead.

-o json prints an array of rows, each with last_code, age_ns, lease_expired and
reconcile_note and past_deadline.
With --fail-if-any, stuck exits 4 when it listed anything: one cron line away
from an alert.

` + exitStatusHelp,
		Example: `  msgq stuck
  msgq stuck --older-than 10m --state unknown --identity shop
  msgq stuck --fail-if-any -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			if a.parsed != nil {
				return a.parsed(o)
			}
			return runStuck(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.olderThan, "older-than", time.Minute, "only rows in their state at least this long (expired leases are listed at any age)")
	f.StringVar(&o.state, "state", "", "only sending or only unknown rows")
	f.StringVar(&o.identity, "identity", "", "only rows of this sending identity")
	f.StringVar(&o.purpose, "purpose", "", "only rows with this purpose")
	f.IntVar(&o.limit, "limit", store.DefaultListLimit, "at most this many rows")
	f.BoolVar(&o.failIfAny, "fail-if-any", false, "exit 4 when any row is listed")
	f.StringVar(&o.tenant, "tenant", "", "tenant (default \"default\") [MSGQ_TENANT]")
	return cmd
}

// stuckRow is one row of `stuck -o json`: the message, and what makes it
// stuck. Field names are a JSON contract.
type stuckRow struct {
	*store.Message
	LastCode     string        `json:"last_code"`
	Age          time.Duration `json:"age_ns"`
	LeaseExpired bool          `json:"lease_expired"`
	// ReconcileNote is why the latest msgq reconcile left the row for a
	// person (its latest note in its current state; "" when none): a
	// search's candidates and their owners, a failed look-up, a token not
	// set.
	ReconcileNote string `json:"reconcile_note"`
	// PastDeadline: an unknown row whose deadline has passed
	// (store.Message.PastDeadline): still stuck, but not to be resent.
	PastDeadline bool `json:"past_deadline"`
}

func runStuck(ctx context.Context, a *app, o *stuckOptions) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	// Ages and lease expiry on the store's clock (PostgreSQL: the
	// server's), the one every drain's lease was written on.
	now, err := st.ClockNow(ctx)
	if err != nil {
		return err
	}
	ms, err := st.MessageStuck(ctx, &store.StuckParams{
		OlderThan: o.olderThan, State: state.State(o.state), Tenant: a.cfg.Tenant, Identity: o.identity,
		Purpose: o.purpose, Now: now, Limit: o.limit,
	})
	if err != nil {
		return err
	}
	rows := make([]stuckRow, len(ms))
	for i := range ms {
		m := &ms[i]
		rows[i] = stuckRow{&m.Message, m.LastCode, now.Sub(m.UpdatedAt),
			m.State == state.Sending && m.LeaseUntil != nil && store.LeaseOver(*m.LeaseUntil, now), m.Note, m.PastDeadline(now)}
	}
	if err := printStuck(a, rows, now); err != nil {
		return err
	}
	if n := countPastDeadline(rows); n > 0 {
		fmt.Fprintf(a.ios.Err, "stuck: %d row(s) past their deadline: a resend would arrive too late; find out whether each reached the customer (msgq reconcile, msgq show) and record it (msgq resolve)\n", n)
	}
	if len(rows) == o.limit {
		fmt.Fprintf(a.ios.Err, "stuck: showing the first %d (oldest); there may be more (--limit)\n", o.limit)
	}
	if o.failIfAny && len(rows) > 0 {
		return &exitError{code: ExitFound, msg: fmt.Sprintf("%d stuck message(s) need a person (--fail-if-any)", len(rows))}
	}
	return nil
}

func printStuck(a *app, rows []stuckRow, now time.Time) error {
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(a.ios.Err, "stuck: nothing")
		return nil
	}
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		lease := "-"
		if r.State == state.Sending {
			lease = "live until " + stampPtr(r.LeaseUntil)
			switch {
			case r.LeaseExpired:
				lease = "expired"
			case r.LeaseUntil != nil && !r.LeaseUntil.After(now):
				// Ended, but within the takeover margin.
				lease = "ended " + stamp(*r.LeaseUntil) + ", taken over from " + stamp(r.LeaseUntil.Add(store.TakeoverMargin))
			}
		}
		st := string(r.State)
		if r.PastDeadline {
			st += " (past deadline)"
		}
		out = append(out, []string{r.ID, r.Key, st, lease, r.Identity, recipient.Mask(r.Channel, r.To), ageLabel(r.Age),
			strconv.Itoa(r.Attempts), orDash(r.LastCode), orDash(r.ReconcileNote)})
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "STATE", "LEASE", "IDENTITY", "TO", "AGE", "ATTEMPTS", "LAST CODE", "RECONCILE NOTE"}, out)
}

func countPastDeadline(rows []stuckRow) int {
	n := 0
	for _, r := range rows {
		if r.PastDeadline {
			n++
		}
	}
	return n
}

// ageLabel formats a duration for tables: to the second, e.g. 3m12s or 49h0m5s.
func ageLabel(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}
