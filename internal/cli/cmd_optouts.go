package cli

import (
	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newOptOutsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "opt-outs",
		Short: "Recipients who opted out of an identity (STOP): list, add, remove",
		Long: `A recipient who opts out of an identity (an inbound STOP, or the provider's own
opted-out answer such as Twilio's 21610) gets no further sends from it: a row to
them fails as opted_out before any call is made (no attempt is counted). Such a
row keeps no claim on its key: once the recipient opts in again (START, UNSTOP,
or opt-outs remove), msgq send with the same key and content queues that row
again (result revived) instead of replaying the refusal. While they are still
opted out, the same send replays the failure.

` + exitStatusHelp,
		Args: exactArgs(0, "a subcommand (list, add or remove)"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newOptOutsListCmd(a), newOptOutsSetCmd(a, true), newOptOutsSetCmd(a, false))
	return cmd
}

func newOptOutsListCmd(a *app) *cobra.Command {
	var identity string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Recipients currently opted out, newest change first",
		Long: `List the recipients currently opted out, newest change first, with what said so
(SOURCE) and when. -o json prints an array of objects with identity, recipient,
opted_out, source, changed_at and recorded_at.

` + exitStatusHelp,
		Example: `  msgq opt-outs list --identity sms-us
  msgq opt-outs list -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			if identity != "" {
				if _, ok := a.cfg.Identities[identity]; !ok {
					return usagef("--identity %s is not configured (see msgq identities)", identity)
				}
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			outs, err := st.ListOptOuts(cmd.Context(), identity, limit)
			if err != nil {
				return err
			}
			return printRows(a, outs, []string{"IDENTITY", "RECIPIENT", "SOURCE", "CHANGED", "RECORDED"},
				func(o *store.OptOut) []string {
					return []string{o.Identity, o.Recipient, o.Source, stamp(o.ChangedAt), stamp(o.RecordedAt)}
				})
		},
	}
	cmd.Flags().StringVar(&identity, "identity", "", "only this identity's opt-outs")
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many")
	return cmd
}
