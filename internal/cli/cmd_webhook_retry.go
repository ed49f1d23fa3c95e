package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newWebhookRetryCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID",
		Short: "Process an unreadable delivery again (after upgrading msgq, say)",
		Long: `Put a delivery that processing could not read (see msgq webhook unreadable)
back in the queue and process it now. What it already gave is not applied
twice: its statuses and inbound messages are deduplicated as usual. A delivery
that was read cleanly, or is still waiting, is refused (exit 2).

` + exitStatusHelp,
		Args: exactArgs(1, "one delivery ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			if err := st.WebhookRetry(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no webhook delivery %s: %w", args[0], err)
				}
				return err
			}
			return processStored(cmd.Context(), a, st)
		},
	}
}
