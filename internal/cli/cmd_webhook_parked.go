package cli

import (
	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newWebhookParkedCmd(a *app) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "Statuses waiting for a message with their provider id, oldest first",
		Long: `List the statuses no message could take yet: their provider id is not recorded
on any message (the drain has not recorded its answer, or the message was sent
by another system on the same number), or their message is still leased by a
drain. They are applied as soon as their message is known (by webhook serve's
worker, msgq webhook process or msgq reconcile); none is dropped. -o json prints
an array of statuses.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			evs, err := st.EvidenceList(cmd.Context(), "", limit)
			if err != nil {
				return err
			}
			return printRows(a, evs, []string{"RECEIVED", "PROVIDER", "IDENTITY", "PROVIDER_ID", "STATUS", "AT", "REF", "CODE"},
				func(e *store.StatusEvidence) []string {
					return []string{stamp(e.ReceivedAt), e.Provider, orDash(e.Identity), e.ProviderID,
						string(e.Status), stamp(e.At), orDash(e.CallbackRef), orDash(e.ErrorCode)}
				})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many statuses")
	return cmd
}
