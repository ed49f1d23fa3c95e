package cli

import (
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newWebhookShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "One stored delivery: its headers, times, error, and raw body",
		Long: `Show one stored webhook delivery. The table form prints the headers msgq kept,
the times, any processing error and the key webhook serve stored it under (a
copy with the same key is not stored again; - for a delivery stored by webhook
replay, or before keys were kept), then the raw body exactly as received (so
that it can be saved and replayed). -o json prints the delivery as an object
(body base64-encoded).

` + exitStatusHelp,
		Args: exactArgs(1, "one delivery ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			ev, err := st.WebhookGet(cmd.Context(), args[0])
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no webhook delivery %s: %w", args[0], err)
				}
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, ev)
			}
			names := make([]string, 0, len(ev.Headers))
			for k := range ev.Headers {
				names = append(names, k)
			}
			sort.Strings(names)
			fields := [][]string{{"id:", ev.ID}, {"provider:", ev.Provider}, {"identity:", orDash(ev.Identity)},
				{"received:", stamp(ev.ReceivedAt)}, {"processed:", stampPtr(ev.ProcessedAt)}, {"error:", orDash(oneLine(ev.Error))},
				{"dedupe key:", orDash(ev.DedupeKey)}}
			for _, k := range names {
				fields = append(fields, []string{k + ":", ev.Headers[k]})
			}
			if err := printTable(a.ios.Out, nil, fields); err != nil {
				return err
			}
			fmt.Fprintln(a.ios.Out, "\nBODY")
			_, err = a.ios.Out.Write(append(ev.Body, '\n'))
			return err
		},
	}
}
