package cli

import (
	"github.com/spf13/cobra"
)

func newWebhookProcessCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "process",
		Short: "Process stored webhook deliveries and apply parked statuses, then exit",
		Long: `Process every stored delivery not processed yet, then apply every pending status
whose message is now known: for cron, when webhook serve runs with --process=false,
or to catch up after a crash. Running it again changes nothing.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			return processStored(cmd.Context(), a, st)
		},
	}
	return cmd
}
