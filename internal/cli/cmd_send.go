package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/mailtemplate"
	"github.com/msgq/msgq/internal/queue"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/storeopen"
)

type sendOptions struct {
	spec queue.Spec
	file string
	// quietHours is --quiet-hours: with --file, every line's default.
	quietHours string
	challenge  challengeFlags
	// set records which per-message flags were given, so --file can refuse
	// them instead of silently ignoring them.
	set []string
}

// perMessageFlags belong to one message and make no sense with --file.
var perMessageFlags = []string{"key", "to", "template", "lang", "param", "text", "subject", "fallback-template", "fallback-param",
	"ref", "not-before", "expires-in", "expires-at"}

func (o *sendOptions) Validate() error {
	if o.file != "" {
		if len(o.set) > 0 {
			return usagef("--%s is per message: with --file put it in each JSON line (--tenant, --identity, --channel, --region, --lane, --purpose and --quiet-hours apply to every line)", o.set[0])
		}
		return nil
	}
	switch {
	case o.spec.Key == "":
		return usagef("--key is required (1 to 64 characters of A-Za-z0-9._:-)")
	case o.spec.To == "":
		return usagef("--to is required (an E.164 number like +15551234567, a local one with --region, or an email address)")
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
		Use:   "send --key KEY --to NUMBER|ADDRESS (--template NAME [--param V]... | --text TEXT [--subject LINE])",
		Short: "Enqueue one logical send (or many with --file); a replay returns the existing row",
		Long: `Enqueue one logical send. The key makes it idempotent: sending the same key with
the same content again returns the existing row (replayed: true) and writes
nothing; the same key with different content is refused with exit 3, naming the
row that holds the key. One exception: a row refused for a policy reason before
any call (failed, reason opted_out) keeps no claim on its key. Sending it again
once the recipient is no longer opted out queues that row again (RESULT
revived, revived: true; history says why), scheduled as this send says; while
they are still opted out it is a replay of the failure.

An email (an identity of provider smtp) is --subject with --text, or a
--template rendered now from the identity's templates directory
(<name>.<lang>.txt with a "Subject:" line, an optional .html, {{1}}-style
parameters): a missing template or a wrong number of --param is bad input and
nothing is written. The row stores the rendered subject, text and HTML, which
is what is sent. --subject on another channel is bad input.

With --file F (- for standard input), each line is one JSON object with the
fields key, to, region, channel, identity, template, lang, params, text,
subject, fallback_template, fallback_params, purpose, ref, lane, not_before, expires_in, expires_at,
tenant, quiet_hours; a challenge's line adds steps (an array of {identity, to, region,
channel, template, lang, params, text, subject, after}), accept_duplicate_risk,
then_if_undelivered and supersedes, and is written in a transaction of its own.
Lines are enqueued in batched transactions; each gets one result line on
stdout, in input order; bad lines are reported with their line number while
the good ones are enqueued. Re-running a file is safe: done lines replay.

Quiet hours: a send due inside its identity's quiet_hours in the recipient's
local time (docs/configuration.md) is scheduled for the window's end; exempt
lanes and purposes go at once. --quiet-hours off sends this one regardless;
--quiet-hours HH:MM-HH:MM gives it its own window. A send whose deadline falls
inside the window is refused (exit 2): it could never go out.

With --then IDENTITY:TO (and --then-text, --then-after for each) the send is a
verification challenge (docs/challenges.md): the message above is step 1, each
--then a later step on its own row (key KEY/2, KEY/3...), all with the deadline
of --expires-in or --expires-at (required). A later step is released at its
--then-after time only when every earlier step provably never reached the
customer (still queued, then canceled, or failed); a step sending or unknown
blocks it (--accept-duplicate-risk waives that), a sent one ends the challenge
(--then-if-undelivered waives that), a delivered or read one completes it.
--supersedes OLDKEY cancels an earlier challenge's steps that have not gone
out, in the same transaction. msgq show KEY shows the challenge.

` + exitStatusHelp + `
  With --file: 0 when every line was enqueued, replayed or revived, 2 when any line was
  bad input, else 3 when any line conflicted.`,
		Example: `  msgq send --key order-1001-shipped --to +15551234567 --template order_update --param Ada --param 1001
  msgq send --key otp-77 --to "(555) 123-4567" --region US --text "Your code is 123456" --lane reply --expires-in 5m
  msgq send --key welcome-ada --identity mail --to ada@example.com --subject "Welcome" --text "Hello Ada"
  msgq send --key ready-1001 --identity mail --to ada@example.com --template order_ready --lang en --param Ada --param 1001
  msgq send --key signup-42-g1 --identity mail --to ada@example.com --subject "Your code" --text "Your code is 123456" \
            --expires-in 10m --then sms-us:+15551234567 --then-text "Your code is 123456" --then-after 2m
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
			if o.challenge.given() {
				if o.file != "" {
					return usagef("--then and the other challenge flags are per message: not with --file")
				}
				if err := o.challenge.validate(&o.spec); err != nil {
					return err
				}
			}
			if a.parsed != nil {
				return a.parsed(o)
			}
			if o.challenge.given() {
				return runSendChallenge(cmd.Context(), a, o)
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
	f.StringVar(&o.spec.Channel, "channel", "", "channel: whatsapp, sms or email, one the identity sends on (default: the identity's channel)")
	f.StringVar(&o.spec.Identity, "identity", "", "sending identity (default: default_identity, else sim) [MSGQ_DEFAULT_IDENTITY]")
	f.StringVar(&o.spec.Template, "template", "", "template name")
	f.StringVar(&o.spec.Lang, "lang", "", "template language (default "+queue.DefaultLang+")")
	f.StringArrayVar(&o.spec.Params, "param", nil, "template parameter, in order; repeat for each")
	f.StringVar(&o.spec.Text, "text", "", "free-form text (instead of a template)")
	f.StringVar(&o.spec.Subject, "subject", "", "an email's subject line, with --text (email only; an email template has its own)")
	f.StringVar(&o.spec.FallbackTemplate, "fallback-template", "", "template to send instead of --text when the customer-service window is closed (known closed, or the provider says so: WhatsApp 131047)")
	f.StringArrayVar(&o.spec.FallbackParams, "fallback-param", nil, "fallback template parameter, in order; repeat for each")
	f.StringVar(&o.spec.Purpose, "purpose", "", "what the message is for (e.g. shipping, otp, marketing)")
	f.StringVar(&o.spec.Ref, "ref", "", "reference to what triggered it (e.g. order:1001)")
	f.StringVar(&o.spec.Lane, "lane", "", "reply (drained first) or bulk (default bulk)")
	f.StringVar(&o.spec.NotBefore, "not-before", "", "do not send before this RFC 3339 time or duration from now")
	f.StringVar(&o.spec.ExpiresIn, "expires-in", "", "give up if not sent within this duration (e.g. 15m)")
	f.StringVar(&o.spec.ExpiresAt, "expires-at", "", "give up if not sent by this RFC 3339 time")
	f.StringVar(&o.quietHours, "quiet-hours", "", "this send's quiet hours: off, or a window HH:MM-HH:MM of the recipient's local time (default: the identity's quiet_hours)")
	f.StringVar(&o.spec.Tenant, "tenant", "", "tenant the key belongs to (default \"default\") [MSGQ_TENANT]")
	f.StringVar(&o.file, "file", "", "enqueue JSON lines from this file (- for standard input)")
	f.StringArrayVar(&o.challenge.then, "then", nil, "a verification challenge's later step, IDENTITY:TO (e.g. sms-us:+15551234567), sent only if every earlier step provably went nowhere (docs/challenges.md; not --fallback-template, WhatsApp's closed-window template); repeat for each step")
	f.StringArrayVar(&o.challenge.thenText, "then-text", nil, "the text of each --then step, in order")
	f.StringArrayVar(&o.challenge.thenSubject, "then-subject", nil, "the subject of each --then step that is an email, in order")
	f.StringArrayVar(&o.challenge.thenAfter, "then-after", nil, "how long after the send each --then step may be released (e.g. 2m), in order")
	f.BoolVar(&o.challenge.acceptDup, "accept-duplicate-risk", false, "release a --then step even past an earlier step that is sending or unknown: it may have reached the customer, so two prompts are possible")
	f.BoolVar(&o.challenge.ifUndeliv, "then-if-undelivered", false, "release a --then step past an earlier step that was sent but has no delivered evidence by then: can produce two prompts")
	f.StringVar(&o.challenge.supersedes, "supersedes", "", "key of an earlier challenge (the user asked for a new code): its steps that have not gone out are canceled with this send")
	return cmd
}

// defaults are the settings that fill what a message leaves empty.
func (a *app) sendDefaults(o *sendOptions) queue.Defaults {
	return queue.Defaults{Tenant: a.cfg.Tenant, Identity: a.cfg.DefaultIdentity, Region: a.cfg.Region,
		Channel: o.spec.Channel, Lane: o.spec.Lane, Purpose: o.spec.Purpose, Identities: a.cfg.Identities,
		Templates: map[string]*mailtemplate.Set{}, QuietHours: o.quietHours}
}

// sendResult is what `send -o json` prints: the row, and whether this call
// created it, found it (replayed) or queued it again after a policy
// refusal (revived).
type sendResult struct {
	*store.Message
	Replayed bool `json:"replayed"`
	Revived  bool `json:"revived"`
	// SMS is the text's segment count, for SMS rows with a text.
	SMS *smsInfo `json:"sms,omitempty"`
}

// enqueueVerb is the RESULT column of an enqueue's row.
func enqueueVerb(replayed, revived bool) string {
	switch {
	case revived:
		return "revived"
	case replayed:
		return "replayed"
	}
	return "enqueued"
}

func runSend(ctx context.Context, a *app, o *sendOptions) error {
	p, err := o.spec.Admit(a.now(), a.sendDefaults(o))
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
	a.log.Debug("enqueued", "id", m.ID, "key", m.Key, "to", recipient.Mask(m.Channel, m.To), "replayed", res.Replayed, "revived", res.Revived)
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, sendResult{m, res.Replayed, res.Revived, smsCost(m)})
	}
	head, row := []string{"ID", "KEY", "STATE", "TO", "RESULT"}, []string{m.ID, m.Key, string(m.State), m.To, enqueueVerb(res.Replayed, res.Revived)}
	if c := smsCost(m); c != nil {
		head, row = append(head, "SMS"), append(row, c.String())
	}
	return printTable(a.ios.Out, head, [][]string{row})
}
