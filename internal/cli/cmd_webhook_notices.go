package cli

import (
	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

func newWebhookNoticesCmd(a *app) *cobra.Command {
	var (
		limit int
		kind  string
	)
	cmd := &cobra.Command{
		Use:   "notices",
		Short: "What providers said about identities rather than messages, newest first",
		Long: `List what webhooks said about an account, a number or a template rather than a
message, and whatever msgq did not understand, newest first:

  error     an error about the number or account (WhatsApp value.errors, e.g.
            130429); one the retry table calls the identity's (a token, a
            locked account) paused the identity (msgq identities)
  template  a template's status (message_template_status_update): PAUSED,
            DISABLED or REJECTED holds the queued rows that use it on the
            account's identities; APPROVED releases them
  quality   the number's quality rating or messaging limit
  account   account updates, reviews and alerts
  unknown   a field or event type msgq does not read: kept, counted (stats:
            unknown_notices) and listed here, never silently dropped

-o json prints an array of notices (detail is the provider's JSON, verbatim).

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			switch kind {
			case "", store.NoticeError, store.NoticeTemplate, store.NoticeQuality, store.NoticeAccount, store.NoticeUnknown:
			default:
				return usagef("--kind must be error, template, quality, account or unknown (got %q)", kind)
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			ns, err := st.NoticeList(cmd.Context(), kind, limit)
			if err != nil {
				return err
			}
			return printRows(a, ns, []string{"RECEIVED", "IDENTITY", "KIND", "FIELD", "CODE", "SUBJECT", "VALUE"},
				func(n *store.Notice) []string {
					subject := n.Subject
					if n.Lang != "" {
						subject += " (" + n.Lang + ")"
					}
					return []string{stamp(n.ReceivedAt), orDash(n.Identity), n.Kind, orDash(n.Field), orDash(n.Code),
						orDash(subject), orDash(oneLine(n.Value))}
				})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many notices")
	cmd.Flags().StringVar(&kind, "kind", "", "only notices of this kind: error, template, quality, account or unknown")
	return cmd
}
