package cli

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/operator"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/store"
)

type resendOptions struct {
	ref        string
	key        string
	acceptRisk bool
	force      bool
	tenant     string // bound to the tenant setting (flag > env > config)
	// text, params and expiresIn change the copy (a new code, a deadline
	// of its own); expires is expiresIn parsed by Validate.
	text      string
	params    []string
	expiresIn string
	expires   time.Duration
}

func (o *resendOptions) Validate() error {
	switch {
	case o.key == "":
		return usagef("--key is required: the resend is a new logical send with a key of its own (1 to 64 characters of A-Za-z0-9._:-)")
	case !store.ValidKey(o.key):
		// The words send uses for a bad key.
		return &store.InvalidError{Field: "key", Msg: fmt.Sprintf("%q must be 1 to 64 characters of A-Za-z0-9._:-", o.key)}
	case o.text != "" && o.params != nil:
		return usagef("--text cannot be combined with --param: a message is a text or a template")
	case !utf8.ValidString(o.text):
		return &store.InvalidError{Field: "text", Msg: "is not valid UTF-8"}
	}
	if o.expiresIn != "" {
		d, err := duration.Parse(o.expiresIn)
		if err != nil {
			return &store.InvalidError{Field: "expires_in", Msg: fmt.Sprintf("%q is not a duration like 90s, 15m, 24h or 2d", o.expiresIn)}
		}
		if d <= 0 {
			return &store.InvalidError{Field: "expires_in", Msg: fmt.Sprintf("%s puts the expiry in the past", o.expiresIn)}
		}
		o.expires = d
	}
	return nil
}

func newResendCmd(a *app) *cobra.Command {
	o := &resendOptions{}
	cmd := &cobra.Command{
		Use:   "resend ID|KEY --key NEWKEY",
		Short: "Send a message again as a new logical send, linked to the first",
		Long: `Create a new logical send copied from an earlier one: the same recipient,
channel, identity, purpose, ref, lane and content (template or text, and the
fallback template), under a new key, with resend_of naming the original. The
original is not changed. The new row is queued; drain sends it. It has no
deadline of its own (the original's has usually passed) unless --expires-in
gives it one. --text replaces a text's words and --param (repeated, in order)
a template's parameters: a verification code resent as a new code, the old
one being worthless (a challenge's step, docs/challenges.md, is resent this
way). The new content is the new row's own.

Which originals may be resent:
  failed                     yes: it did not reach the phone
  unknown                    only with --accept-duplicate-risk: the first send may
                             have reached the phone (a lost answer, a drain that
                             died mid-call), so the customer may get the message
                             twice. Prefer finding out first: msgq reconcile, or
                             msgq resolve --as failed once you know it did not.
                             (A failed row flagged maybe_sent needs it too.)
  sent, delivered, read      only with --force: the provider accepted it, so the
                             customer has it or will, and gets it again
  queued, sending            never: it may still go out (cancel a queued one first)

A message that was already resent is refused again without --force: a second
resend would reach the customer on top of the first.

NEWKEY follows the rules of msgq send: running the same resend again returns the
row it created (replayed: true) and writes nothing; a NEWKEY that already names
another message is refused with exit 3. A refusal by state is one line naming
the row and its state; it exits 1 and writes nothing.

` + exitStatusHelp,
		Example: `  msgq resend order-1001-shipped --key order-1001-shipped-r2
  msgq resend 01JD5Q3XK0M9T4W8Y2B6C1N7PZ --key otp-77-r2 --accept-duplicate-risk -o json`,
		Args: exactArgs(1, "one message id or key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			if err := o.Validate(); err != nil {
				return err
			}
			if a.parsed != nil {
				return a.parsed(o)
			}
			return runResend(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "", "idempotency key of the new send: 1 to 64 characters of A-Za-z0-9._:-")
	f.BoolVar(&o.acceptRisk, "accept-duplicate-risk", false,
		"resend an unknown message: its first send may have reached the phone, so the customer may get it twice")
	f.BoolVar(&o.force, "force", false, "resend a message the provider accepted (sent, delivered, read): the customer gets it again")
	f.StringVar(&o.tenant, "tenant", "", "tenant of the key (default \"default\") [MSGQ_TENANT]")
	f.StringVar(&o.text, "text", "", "the new send's text, instead of the original's (a text message only)")
	f.StringArrayVar(&o.params, "param", nil, "the new send's template parameters, in order, instead of the original's; repeat for each")
	f.StringVar(&o.expiresIn, "expires-in", "", "give the new send a deadline of its own: give up if not sent within this duration (e.g. 10m)")
	return cmd
}

func runResend(ctx context.Context, a *app, o *resendOptions) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	res, err := operator.Resend(ctx, operator.ResendConfig{Store: st, Tenant: a.cfg.Tenant, Ref: o.ref, Key: o.key,
		AcceptRisk: o.acceptRisk, Force: o.force, Text: o.text, Params: o.params, ExpiresIn: o.expires,
		CheckIdentity: func(name string) error {
			if _, ok := a.cfg.Identities[name]; !ok {
				return identities.Unknown(name, a.cfg.Identities)
			}
			return nil
		}})
	if err != nil {
		return err
	}
	m := res.Message
	a.log.Debug("resent", "id", m.ID, "key", m.Key, "resend_of", res.Original.ID, "to", recipient.Mask(m.Channel, m.To), "replayed", res.Replayed, "revived", res.Revived)
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, sendResult{m, res.Replayed, res.Revived, smsCost(m)})
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "STATE", "TO", "RESEND OF", "RESULT"},
		[][]string{{m.ID, m.Key, string(m.State), m.To, m.ResendOf, enqueueVerb(res.Replayed, res.Revived)}})
}
