package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/api"
	"github.com/msgq/msgq/internal/store"
)

// apiKeyCreated is what `api-keys create -o json` prints: the key's row and,
// this once, the key itself.
type apiKeyCreated struct {
	*store.APIKey
	Key string `json:"key"`
}

func newAPIKeysCreateCmd(a *app) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "create --tenant TENANT --name NAME",
		Short: "Create an API key for one tenant and print it (once)",
		Long: `Create an API key bound to --tenant and print it on stdout. This is the only
time the key is shown: the store keeps its SHA-256 alone. --name (unique among
keys not revoked) is how list shows it and revoke finds it.

` + exitStatusHelp + `
  3 is also a name already used by a key that is not revoked.`,
		Example: `  msgq api-keys create --tenant shop --name checkout
  KEY=$(msgq api-keys create --tenant shop --name checkout -o json | jq -r .key)`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant := a.cfg.Tenant
			switch {
			case !cmd.Flags().Changed("tenant"):
				return usagef("--tenant is required: a key is bound to one tenant")
			case !store.ValidKey(tenant):
				return usagef("--tenant %q must be 1 to 64 characters of A-Za-z0-9._:-", tenant)
			case name == "":
				return usagef("--name is required (1 to 64 characters of A-Za-z0-9._:-)")
			case !store.ValidKey(name):
				return usagef("--name %q must be 1 to 64 characters of A-Za-z0-9._:-", name)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			token, hash := api.NewToken()
			k, err := st.APIKeyCreate(cmd.Context(), store.APIKeyParams{Tenant: tenant, Name: name, Hash: hash})
			if err != nil {
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, apiKeyCreated{k, token})
			}
			fmt.Fprintln(a.ios.Out, token)
			fmt.Fprintf(a.ios.Err, "api key %s (%s) for tenant %s: shown this once, keep it now\n", k.Name, k.ID, k.Tenant)
			return nil
		},
	}
	cmd.Flags().String("tenant", "", "the tenant the key is bound to (required)")
	cmd.Flags().StringVar(&name, "name", "", "a name for the key, unique among keys not revoked (required)")
	return cmd
}
