package cli

import (
	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newAPIKeysListCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never the keys themselves), oldest first",
		Long: `List every API key, revoked ones too, oldest first: its id, tenant, name, when
it was created, revoked and last used. The keys themselves are not kept, so
they are never shown. -o json prints an array of objects with id, tenant, name,
created_at, revoked_at and last_used_at.

` + exitStatusHelp,
		Example: `  msgq api-keys list
  msgq api-keys list -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			keys, err := st.APIKeyList(cmd.Context())
			if err != nil {
				return err
			}
			return printRows(a, keys, []string{"ID", "TENANT", "NAME", "CREATED", "REVOKED", "LAST USED"},
				func(k *store.APIKey) []string {
					return []string{k.ID, k.Tenant, k.Name, stamp(k.CreatedAt), stampPtr(k.RevokedAt), stampPtr(k.LastUsedAt)}
				})
		},
	}
	return cmd
}
