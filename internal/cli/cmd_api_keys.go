package cli

import (
	"github.com/spf13/cobra"
)

func newAPIKeysCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "api-keys",
		Short: "Keys of msgq serve's HTTP API: create, list, revoke",
		Long: `Keys of msgq serve's HTTP API (docs/api.md). Each key is bound to one tenant: it
sees and creates only that tenant's messages. The store keeps only a key's
SHA-256: create prints the key once, and nothing can show it again. A revoked
key is refused by msgq serve once its cached look-up expires (serve's
--key-cache, 5s by default).

` + exitStatusHelp,
		Args: exactArgs(0, "a subcommand (create, list or revoke)"),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAPIKeysCreateCmd(a), newAPIKeysListCmd(a), newAPIKeysRevokeCmd(a))
	return cmd
}
