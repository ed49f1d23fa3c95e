package cli

import (
	"context"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/operator"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type resolveOptions struct {
	ref    string
	as     string
	note   string
	by     string
	tenant string // bound to the tenant setting (flag > env > config)
}

func (o *resolveOptions) Validate() error {
	switch {
	case o.as == "":
		return usagef("--as is required: sent (it reached the provider) or failed (it did not)")
	case o.as != string(state.Sent) && o.as != string(state.Failed):
		return usagef("--as must be sent or failed (got %q)", o.as)
	case strings.TrimSpace(o.note) == "":
		return usagef("--note is required: say why (it is kept in the message's history)")
	case strings.TrimSpace(o.by) == "":
		return usagef("--by is required: no operating-system user to name (give --by NAME)")
	}
	return nil
}

func newResolveCmd(a *app) *cobra.Command {
	o := &resolveOptions{}
	cmd := &cobra.Command{
		Use:   "resolve ID|KEY --as sent|failed --note TEXT",
		Short: "Record a person's verdict on a message nobody knows the outcome of",
		Long: `Record an operator's verdict on an uncertain message: one in unknown (a call may
have reached the phone and no evidence says so), or one still in sending whose
drain vanished (its lease is over: it ended at least ` + store.TakeoverMargin.String() + ` ago, the takeover
margin that lets a drain which checked its lease just before the end finish
its call; msgq stuck lists it then).

--as sent: it went out (the customer has it). --as failed: it did not, and the
row becomes failed(resolved); only then is 'msgq resend' allowed without
--accept-duplicate-risk.

The verdict, the note and who gave it (--by, default the operating-system user)
go into the row's history and its resolution. Every other state is refused:
finished rows (sent, failed, delivered, read) are settled, a queued row has not
gone out (use msgq cancel), and a sending row whose lease is still live belongs
to the drain that holds it. A refusal is one line naming the row and its
state; it exits 1 and writes nothing.

` + exitStatusHelp,
		Example: `  msgq resolve order-1001-shipped --as sent --note "customer confirmed on the phone"
  msgq resolve 01JD5Q3XK0M9T4W8Y2B6C1N7PZ --as failed --note "provider support: never accepted" --by alice`,
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
			return runResolve(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.as, "as", "", "the verdict: sent or failed")
	f.StringVar(&o.note, "note", "", "why (required; kept in the history)")
	f.StringVar(&o.by, "by", "", "who decides (default: the operating-system user, else $USER)")
	f.StringVar(&o.tenant, "tenant", "", "tenant of the key (default \"default\") [MSGQ_TENANT]")
	return cmd
}

// operatorResult is what resolve and cancel print with -o json: the row as
// it is now, plus the state it was in.
type operatorResult struct {
	*store.Message
	From state.State `json:"from"`
}

func runResolve(ctx context.Context, a *app, o *resolveOptions) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	res, err := operator.Resolve(ctx, operator.ResolveConfig{Store: st, Tenant: a.cfg.Tenant, Ref: o.ref,
		As: state.State(o.as), Note: o.note, By: o.by})
	if err != nil {
		return err
	}
	a.log.Debug("resolved", "id", res.Before.ID, "key", res.Before.Key, "from", res.Before.State, "to", res.After.State)
	return printOperatorResult(a, res.Before, res.After, res.Resolution)
}

// printOperatorResult prints what resolve or cancel did: one row, from and
// to, and the recorded resolution.
func printOperatorResult(a *app, before, after *store.Message, what string) error {
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, operatorResult{after, before.State})
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "FROM", "TO", "RESOLUTION"},
		[][]string{{after.ID, after.Key, stateLabel(before), stateLabel(after), what}})
}

// osUser is the operating-system user, for --by: os/user, else $USER
// (else $USERNAME on Windows), else "".
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return os.Getenv("USERNAME")
}
