package cli

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/operator"
)

type cancelOptions struct {
	ref    string
	note   string
	by     string
	tenant string // bound to the tenant setting (flag > env > config)
	// acceptMaybeSent allows canceling a queued row flagged maybe_sent.
	acceptMaybeSent bool
}

func (o *cancelOptions) Validate() error {
	if strings.TrimSpace(o.by) == "" {
		return usagef("--by is required: no operating-system user to name (give --by NAME)")
	}
	return nil
}

func newCancelCmd(a *app) *cobra.Command {
	o := &cancelOptions{}
	cmd := &cobra.Command{
		Use:   "cancel ID|KEY",
		Short: "Stop a message that has not gone out (a queued one)",
		Long: `Stop a message that has not gone out: only a queued row. It becomes
failed(canceled), drain never claims it, and who canceled it (--by, default the
operating-system user) and why (--note) go into its history and resolution.

A queued row flagged maybe_sent (queued again after a call whose answer was
lost, for a provider that deduplicates by key) may already have reached the
phone: cancel says so and refuses unless --accept-maybe-sent is given. Then it
stops further attempts, recalls nothing, and the resolution says the message
may have gone out. Letting such a row go out is safe: its provider
deduplicates the retry by its key.

Every other state is refused: a sending row may be on its way to the phone
right now, an unknown one may have reached it (see msgq resolve), and finished
rows are settled. A refusal is one line naming the row and its state; it exits
1 and writes nothing.

` + exitStatusHelp,
		Example: `  msgq cancel order-1001-shipped
  msgq cancel 01JD5Q3XK0M9T4W8Y2B6C1N7PZ --note "order refunded" -o json
  msgq cancel order-1002-shipped --accept-maybe-sent --note "refunded; may have gone out"`,
		Args: exactArgs(1, "one message id or key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			if !cmd.Flags().Changed("by") {
				o.by = osUser()
			}
			if err := o.Validate(); err != nil {
				return err
			}
			if a.parsed != nil {
				return a.parsed(o)
			}
			return runCancel(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.note, "note", "", "why (optional; kept in the history)")
	f.StringVar(&o.by, "by", "", "who cancels (default: the operating-system user, else $USER)")
	f.StringVar(&o.tenant, "tenant", "", "tenant of the key (default \"default\") [MSGQ_TENANT]")
	f.BoolVar(&o.acceptMaybeSent, "accept-maybe-sent", false, "cancel a queued row flagged maybe_sent, which may already have reached the phone")
	return cmd
}

func runCancel(ctx context.Context, a *app, o *cancelOptions) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	res, err := operator.Cancel(ctx, operator.CancelConfig{Store: st, Tenant: a.cfg.Tenant, Ref: o.ref, Note: o.note, By: o.by,
		AcceptMaybeSent: o.acceptMaybeSent})
	if err != nil {
		return err
	}
	a.log.Debug("canceled", "id", res.Before.ID, "key", res.Before.Key)
	return printOperatorResult(a, res.Before, res.After, res.Resolution)
}
