package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

// suspectList is webhook suspect's JSON. Field names are a contract.
type suspectList struct {
	Statuses   []store.StatusEvidence `json:"statuses"`
	Collisions []store.Collision      `json:"collisions"`
}

func newWebhookSuspectCmd(a *app) *cobra.Command {
	limit := 0
	cmd := &cobra.Command{
		Use:   "suspect",
		Short: "Statuses set aside because they disagree with their message, and provider id collisions",
		Long: `List the evidence msgq would not apply because it contradicts itself, oldest first:

  - statuses whose own reference (WhatsApp's biz_opaque_callback_data, the http
    API's ref) names another message than their provider id does, or whose
    recipient is not the message's, or that came through an identity other
    than the message's (or a WhatsApp number no identity has);
  - provider id collisions: messages of one identity that share a provider id
    (rows written before ids were unique per identity, or a provider that
    issued an id twice). Statuses naming such an id are set aside too.

None of it moved a message. Look at the messages named (msgq show ID) and
settle them if the evidence says what became of them (msgq resolve ID --as
sent|failed --note ...). -o json prints {statuses, collisions}.

` + exitStatusHelp,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return usagef("--limit must be positive")
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			sus, err := st.EvidenceSuspects(cmd.Context(), limit)
			if err != nil {
				return err
			}
			col, err := st.ProviderIDCollisions(cmd.Context(), limit)
			if err != nil {
				return err
			}
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, suspectList{Statuses: sus, Collisions: col})
			}
			rows := make([][]string, 0, len(sus))
			for _, e := range sus {
				rows = append(rows, []string{stamp(e.ReceivedAt), e.Provider, orDash(e.Identity), e.ProviderID, string(e.Status),
					orDash(e.CallbackRef), oneLine(e.Suspect)})
			}
			if err := printTable(a.ios.Out, []string{"RECEIVED", "PROVIDER", "IDENTITY", "PROVIDER_ID", "STATUS", "REF", "WHY"}, rows); err != nil {
				return err
			}
			if len(col) == 0 {
				return nil
			}
			fmt.Fprintln(a.ios.Out, "\nPROVIDER ID COLLISIONS")
			rows = rows[:0]
			for _, c := range col {
				rows = append(rows, []string{c.Identity, c.ProviderID, c.MessageID, string(c.State), stamp(c.CreatedAt)})
			}
			return printTable(a.ios.Out, []string{"IDENTITY", "PROVIDER_ID", "ID", "STATE", "CREATED"}, rows)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many statuses (and as many collisions)")
	return cmd
}
