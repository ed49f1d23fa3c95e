package cli

import (
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

func newMigrateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Bring the store's schema up to date",
		Long: `Apply the store's pending schema migrations. Every command migrates on first use;
run this explicitly before rolling out a new msgq to many hosts. Safe to run from
several processes at once.

On PostgreSQL it also records the config's identity names (and its default) for
the SQL function enqueue(), which applications call inside their own transactions
(docs/sql-enqueue.md): run it once for a config that adds an identity.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := storeopen.Open(cmd.Context(), a.cfg.Store, storeopen.Options{NoMigrate: true, Log: a.log, Now: a.now})
			if err != nil {
				return err
			}
			defer st.Close()
			applied, err := st.Migrate(cmd.Context())
			if err != nil {
				return err
			}
			if se, ok := st.(store.SQLEnqueuer); ok {
				if err := se.SQLIdentitiesRecord(cmd.Context(), sqlIdentities(a.cfg)); err != nil {
					return err
				}
			}
			// Rows that shared a provider id within their identity before
			// ids were unique per identity are kept and marked, not a
			// failed migration: say so, every run, until they are settled.
			ws, err := st.WebhookStats(cmd.Context())
			if err != nil {
				return err
			}
			if ws.ProviderIDCollisions > 0 {
				fmt.Fprintf(a.ios.Err, "migrate: %d messages share a provider id with another message of their identity; their statuses are set aside (msgq webhook suspect)\n",
					ws.ProviderIDCollisions)
			}
			if a.cfg.Output == outJSON {
				if applied == nil {
					applied = []int{}
				}
				return printJSON(a.ios.Out, map[string]any{"store": storeopen.RedactURL(a.cfg.Store), "applied": applied,
					"provider_id_collisions": ws.ProviderIDCollisions})
			}
			if len(applied) == 0 {
				_, err = fmt.Fprintf(a.ios.Out, "%s: schema is up to date\n", storeopen.RedactURL(a.cfg.Store))
				return err
			}
			_, err = fmt.Fprintf(a.ios.Out, "%s: applied migrations %v\n", storeopen.RedactURL(a.cfg.Store), applied)
			return err
		},
	}
}

// sqlIdentities are cfg's identity names as enqueue() accepts them
// (docs/sql-enqueue.md), in name order.
func sqlIdentities(cfg *config) []store.SQLIdentity {
	out := make([]store.SQLIdentity, 0, len(cfg.Identities))
	for _, name := range slices.Sorted(maps.Keys(cfg.Identities)) {
		out = append(out, store.SQLIdentity{Name: name, Default: name == cfg.DefaultIdentity})
	}
	return out
}
