package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

type sendOptions struct {
	spec sendSpec
	file string
	// set records which per-message flags were given, so --file can refuse
	// them instead of silently ignoring them.
	set []string
}

// perMessageFlags belong to one message and make no sense with --file.
var perMessageFlags = []string{"key", "to", "template", "lang", "param", "text", "fallback-template", "fallback-param",
	"ref", "not-before", "expires-in", "expires-at"}

func (o *sendOptions) Validate() error {
	if o.file != "" {
		if len(o.set) > 0 {
			return usagef("--%s is per message: with --file put it in each JSON line (--tenant, --identity, --channel, --region, --lane and --purpose apply to every line)", o.set[0])
		}
		return nil
	}
	switch {
	case o.spec.Key == "":
		return usagef("--key is required (1 to 64 characters of A-Za-z0-9._:-)")
	case o.spec.To == "":
		return usagef("--to is required (an E.164 number like +15551234567, or a local one with --region)")
	case o.spec.Text != "" && o.spec.Template != "":
		return usagef("--text cannot be combined with --template: send one or the other")
	case o.spec.Text == "" && o.spec.Template == "":
		return usagef("give --template NAME (with --lang and --param) or --text TEXT")
	}
	return nil
}

func newSendCmd(a *app) *cobra.Command {
	o := &sendOptions{}
	cmd := &cobra.Command{
		Use:   "send --key KEY --to NUMBER (--template NAME [--param V]... | --text TEXT)",
		Short: "Enqueue one logical send (or many with --file); a replay returns the existing row",
		Long: `Enqueue one logical send. The key makes it idempotent: sending the same key with
the same content again returns the existing row (replayed: true) and writes
nothing; the same key with different content is refused with exit 3, naming the
row that holds the key.

With --file F (- for standard input), each line is one JSON object with the
fields key, to, region, channel, identity, template, lang, params, text,
fallback_template, fallback_params, purpose, ref, lane, not_before, expires_in, expires_at,
tenant. Lines are enqueued in batched transactions; each gets one result line on
stdout, in input order; bad lines are reported with their line number while
the good ones are enqueued. Re-running a file is safe: done lines replay.

` + exitStatusHelp + `
  With --file: 0 when every line was enqueued or replayed, 2 when any line was
  bad input, else 3 when any line conflicted.`,
		Example: `  msgq send --key order-1001-shipped --to +15551234567 --template order_update --param Ada --param 1001
  msgq send --key otp-77 --to "(555) 123-4567" --region US --text "Your code is 123456" --lane reply --expires-in 5m
  msgq send --file messages.jsonl -o json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range perMessageFlags {
				if cmd.Flags().Changed(name) {
					o.set = append(o.set, name)
				}
			}
			if err := o.Validate(); err != nil {
				return err
			}
			if o.file != "" {
				return runSendFile(cmd.Context(), a, o)
			}
			return runSend(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.spec.Key, "key", "", "idempotency key: 1 to 64 characters of A-Za-z0-9._:-")
	f.StringVar(&o.spec.To, "to", "", "recipient: E.164 (+15551234567) or a local number with --region")
	f.StringVar(&o.spec.Region, "region", "", "ISO country code for local numbers, e.g. US [MSGQ_REGION]")
	f.StringVar(&o.spec.Channel, "channel", "", "channel: whatsapp or sms, one the identity sends on (default: the identity's channel)")
	f.StringVar(&o.spec.Identity, "identity", "", "sending identity (default: default_identity, else sim) [MSGQ_DEFAULT_IDENTITY]")
	f.StringVar(&o.spec.Template, "template", "", "template name")
	f.StringVar(&o.spec.Lang, "lang", "", "template language (default "+defaultLang+")")
	f.StringArrayVar(&o.spec.Params, "param", nil, "template parameter, in order; repeat for each")
	f.StringVar(&o.spec.Text, "text", "", "free-form text (instead of a template)")
	f.StringVar(&o.spec.FallbackTemplate, "fallback-template", "", "template to send instead of --text when the customer-service window is closed (known closed, or the provider says so: WhatsApp 131047)")
	f.StringArrayVar(&o.spec.FallbackParams, "fallback-param", nil, "fallback template parameter, in order; repeat for each")
	f.StringVar(&o.spec.Purpose, "purpose", "", "what the message is for (e.g. shipping, otp, marketing)")
	f.StringVar(&o.spec.Ref, "ref", "", "reference to what triggered it (e.g. order:1001)")
	f.StringVar(&o.spec.Lane, "lane", "", "reply (drained first) or bulk (default bulk)")
	f.StringVar(&o.spec.NotBefore, "not-before", "", "do not send before this RFC 3339 time or duration from now")
	f.StringVar(&o.spec.ExpiresIn, "expires-in", "", "give up if not sent within this duration (e.g. 15m)")
	f.StringVar(&o.spec.ExpiresAt, "expires-at", "", "give up if not sent by this RFC 3339 time")
	f.StringVar(&o.spec.Tenant, "tenant", "", "tenant the key belongs to (default \"default\") [MSGQ_TENANT]")
	f.StringVar(&o.file, "file", "", "enqueue JSON lines from this file (- for standard input)")
	return cmd
}

// defaults are the settings that fill what a message leaves empty.
func (a *app) sendDefaults(o *sendOptions) sendDefaults {
	return sendDefaults{Tenant: a.cfg.Tenant, Identity: a.cfg.DefaultIdentity, Region: a.cfg.Region,
		Channel: o.spec.Channel, Lane: o.spec.Lane, Purpose: o.spec.Purpose, Identities: a.cfg.Identities}
}

// sendResult is what `send -o json` prints: the row, and whether this call
// created it or found it.
type sendResult struct {
	*store.Message
	Replayed bool `json:"replayed"`
}

func runSend(ctx context.Context, a *app, o *sendOptions) error {
	p, err := o.spec.params(a.now(), a.sendDefaults(o))
	if err != nil {
		return err
	}
	var res *store.EnqueueResult
	err = a.retryLostConnection(ctx, func() error {
		st, err := a.store(ctx)
		if err != nil {
			return err
		}
		res, err = st.MessageEnqueue(ctx, &p)
		return err
	})
	if err != nil {
		return storeopen.RedactErr(a.cfg.Store, err)
	}
	m := res.Message
	a.log.Debug("enqueued", "id", m.ID, "key", m.Key, "to", recipient.Mask(m.Channel, m.To), "replayed", res.Replayed)
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, sendResult{m, res.Replayed})
	}
	verb := "enqueued"
	if res.Replayed {
		verb = "replayed"
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "STATE", "TO", "RESULT"},
		[][]string{{m.ID, m.Key, string(m.State), m.To, verb}})
}
