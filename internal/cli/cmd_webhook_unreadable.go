package cli

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newWebhookUnreadableCmd(a *app) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "unreadable",
		Short: "Stored deliveries processing could not read (in whole or in part), oldest first",
		Long: `List the deliveries that were stored (answered 200) but that processing could
not read, or read only in part (items skipped): a parser that does not know a
new shape, or a database limit. Their raw bodies are kept, and purge keeps them.
Look at one with msgq webhook show ID; once msgq reads it (a newer msgq), put it
back with msgq webhook retry ID. -o json prints an array of deliveries.

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
			evs, err := st.WebhookUnreadable(cmd.Context(), limit)
			if err != nil {
				return err
			}
			return printRows(a, evs, []string{"ID", "RECEIVED", "PROVIDER", "IDENTITY", "BYTES", "ERROR"},
				func(e *store.WebhookEvent) []string {
					return []string{e.ID, stamp(e.ReceivedAt), e.Provider, orDash(e.Identity), strconv.Itoa(len(e.Body)), oneLine(e.Error)}
				})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many deliveries")
	return cmd
}
