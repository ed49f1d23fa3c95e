package cli

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/store"
)

type optOutSetOptions struct {
	identity, to, region, by string
}

func (o *optOutSetOptions) Validate() error {
	switch {
	case o.identity == "":
		return usagef("--identity is required: an opt-out is from one identity")
	case o.to == "":
		return usagef("--to is required: the recipient (E.164 number or email address)")
	case strings.TrimSpace(o.by) == "":
		return usagef("--by is required: no operating-system user to name (give --by NAME)")
	}
	return nil
}

// newOptOutsSetCmd builds "opt-outs add" (out) or "opt-outs remove".
func newOptOutsSetCmd(a *app, out bool) *cobra.Command {
	o := &optOutSetOptions{}
	use, short, verb := "remove", "Opt a recipient in again: sends to them resume", "opted in"
	if out {
		use, short, verb = "add", "Opt a recipient out of an identity: later sends to them are refused before any call", "opted out"
	}
	cmd := &cobra.Command{
		Use:   use + " --identity NAME --to RECIPIENT",
		Short: short,
		Long: short + `. The change is recorded with the
operator's name as its source and the current time; a later STOP or START from
the recipient overrides it. Prints the recipient's standing (with changed:
false when it already was so).

` + exitStatusHelp,
		Example: fmt.Sprintf("  msgq opt-outs %s --identity sms-us --to +15551234567", use),
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.by == "" {
				o.by = osUser()
			}
			if err := o.Validate(); err != nil {
				return err
			}
			if a.parsed != nil {
				return a.parsed(o)
			}
			id, ok := a.cfg.Identities[o.identity]
			if !ok {
				return usagef("--identity %s is not configured (see msgq identities)", o.identity)
			}
			channel := id.Channels[0]
			if strings.Contains(o.to, "@") {
				channel = recipient.Email
			}
			to, err := recipient.Normalize(channel, o.to, cmp.Or(o.region, a.cfg.Region))
			if err != nil {
				return usagef("--to: %v", err)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			changed, err := st.SetOptOut(cmd.Context(), store.OptOutParams{Identity: o.identity, Recipient: to, OptedOut: out,
				Source: "operator " + o.by})
			if err != nil {
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, map[string]any{"identity": o.identity, "recipient": to, "opted_out": out, "changed": changed})
			}
			state := verb
			if !changed {
				state = "already " + verb
			}
			_, err = fmt.Fprintf(a.ios.Out, "%s %s of %s\n", to, state, o.identity)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.identity, "identity", "", "the identity")
	f.StringVar(&o.to, "to", "", "the recipient: E.164 (+15551234567), a local number with --region, or an email address")
	f.StringVar(&o.region, "region", "", "ISO country code for a local number [MSGQ_REGION]")
	f.StringVar(&o.by, "by", "", "who decides (default: the operating-system user, else $USER)")
	return cmd
}
