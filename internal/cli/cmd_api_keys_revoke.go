package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newAPIKeysRevokeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke ID|NAME",
		Short: "Revoke an API key: msgq serve refuses it from then on",
		Long: `Revoke the API key with this id, or the key not revoked with this name. A
running msgq serve refuses it (401) once its cached look-up expires (--key-cache,
5s by default). Revoking a revoked key (by id) changes nothing.

` + exitStatusHelp,
		Example: `  msgq api-keys revoke checkout
  msgq api-keys revoke 01JD5Q3XK0M9T4W8Y2B6C1N7PZ`,
		Args: exactArgs(1, "one key id or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			k, err := st.APIKeyRevoke(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, k)
			}
			fmt.Fprintf(a.ios.Out, "api key %s (%s, tenant %s) revoked at %s\n", k.Name, k.ID, k.Tenant, stampPtr(k.RevokedAt))
			return nil
		},
	}
	return cmd
}
