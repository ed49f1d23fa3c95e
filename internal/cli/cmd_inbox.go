package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/store"
)

type inboxOptions struct {
	unattributed   bool
	identity, from string
	region, since  string
	limit          int
}

func (o *inboxOptions) params(now time.Time, cfg *config) (*store.InboxParams, error) {
	p := &store.InboxParams{Unattributed: o.unattributed, Identity: o.identity, Limit: o.limit}
	if o.limit <= 0 {
		return nil, usagef("--limit must be positive")
	}
	if o.identity != "" {
		if _, ok := cfg.Identities[o.identity]; !ok {
			return nil, usagef("--identity %s is not configured (see msgq identities)", o.identity)
		}
	}
	if o.from != "" {
		from, err := addressFlag("--from", o.from, o.region, cfg)
		if err != nil {
			return nil, err
		}
		p.From = from
	}
	if o.since != "" {
		t, err := parseSince(o.since, now)
		if err != nil {
			return nil, usagef("--since: %v", err)
		}
		p.Since = t
	}
	return p, nil
}

func newInboxCmd(a *app) *cobra.Command {
	o := &inboxOptions{}
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Inbound messages, newest first; --unattributed for the ones no message could be linked to",
		Long: `List the messages customers sent (received through webhook serve or replay),
newest first. Each is linked to the message it replied to when the reply named
one (WhatsApp's context.id) and msgq sent it. Button and list replies show the
id of the choice (REPLY_ID), which is what to match on; the title is what the
customer saw. --unattributed lists the replies no message could be linked to:
a work list for a person. -o json prints an array of objects with id, from,
text, reply_id, message_id (null when unattributed) and received_at.

` + exitStatusHelp,
		Example: `  msgq inbox --unattributed
  msgq inbox --from +15551234567 --since 24h -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := o.params(a.now(), a.cfg)
			if err != nil {
				return err
			}
			st, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			ins, err := st.InboxList(cmd.Context(), p)
			if err != nil {
				return err
			}
			return printRows(a, ins, []string{"ID", "RECEIVED", "FROM", "IDENTITY", "TYPE", "TEXT", "REPLY_ID", "REPLY_TITLE", "MESSAGE"},
				func(in *store.Inbound) []string {
					msg := "-"
					if in.MessageID != nil {
						msg = *in.MessageID
					}
					return []string{in.ID, stamp(in.ReceivedAt), orDash(in.From), orDash(in.Identity), in.Type,
						orDash(in.Text), orDash(in.ReplyID), orDash(in.ReplyTitle), msg}
				})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.unattributed, "unattributed", false, "only messages no sent message could be linked to")
	f.StringVar(&o.identity, "identity", "", "only messages to this identity")
	f.StringVar(&o.from, "from", "", "only messages from this number")
	f.StringVar(&o.region, "region", "", "ISO country code for a local --from number [MSGQ_REGION]")
	f.StringVar(&o.since, "since", "", "only messages received since this RFC 3339 time, or this long ago (e.g. 24h)")
	f.IntVar(&o.limit, "limit", store.DefaultListLimit, "at most this many messages")
	return cmd
}
