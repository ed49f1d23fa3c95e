package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type resendOptions struct {
	ref        string
	key        string
	acceptRisk bool
	force      bool
	tenant     string // bound to the tenant setting (flag > env > config)
}

func (o *resendOptions) Validate() error {
	switch {
	case o.key == "":
		return usagef("--key is required: the resend is a new logical send with a key of its own (1 to 64 characters of A-Za-z0-9._:-)")
	case !store.ValidKey(o.key):
		// The words send uses for a bad key.
		return &store.InvalidError{Field: "key", Msg: fmt.Sprintf("%q must be 1 to 64 characters of A-Za-z0-9._:-", o.key)}
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
deadline of its own (the original's has usually passed).

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
			return runResend(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "", "idempotency key of the new send: 1 to 64 characters of A-Za-z0-9._:-")
	f.BoolVar(&o.acceptRisk, "accept-duplicate-risk", false,
		"resend an unknown message: its first send may have reached the phone, so the customer may get it twice")
	f.BoolVar(&o.force, "force", false, "resend a message the provider accepted (sent, delivered, read): the customer gets it again")
	f.StringVar(&o.tenant, "tenant", "", "tenant of the key (default \"default\") [MSGQ_TENANT]")
	return cmd
}

// resendConflictError is a NEWKEY that names a message other than a resend
// of this original (exit 3, like any key reused for another message).
type resendConflictError struct {
	key, existingID, original string
}

func (e *resendConflictError) Error() string {
	return fmt.Sprintf("key %q is already used by message %s, which is not a resend of %s", e.key, e.existingID, e.original)
}

func (e *resendConflictError) Is(target error) bool { return target == store.ErrConflict }

func runResend(ctx context.Context, a *app, o *resendOptions) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	orig, err := messageByRef(ctx, st, a.cfg.Tenant, o.ref)
	if err != nil {
		return err
	}
	if o.key == orig.Key {
		return usagef("--key %q is the original's own key: a resend is a new logical send and needs a new key", o.key)
	}
	// A replay of this very resend returns the row it made, whatever the
	// original's state has become since; a key held by any other message
	// is a conflict. MessageEnqueue decides both again atomically below.
	existing, err := st.MessageGet(ctx, orig.Tenant, o.key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		existing = nil
	case err != nil:
		return err
	}
	if existing != nil && existing.ResendOf != orig.ID {
		return &resendConflictError{o.key, existing.ID, rowLabel(orig)}
	}
	if existing == nil {
		if err := resendAllowed(orig, o); err != nil {
			return err
		}
		// A second resend (under yet another key) sends the content again
		// on top of the first resend: that is a duplicate for the
		// customer unless someone means it.
		earlier, err := st.MessageList(ctx, &store.ListParams{Tenant: orig.Tenant, ResendOf: orig.ID, Limit: 1})
		if err != nil {
			return err
		}
		if len(earlier) > 0 && !o.force {
			return refusedf(state.ErrRefused, "cannot resend %s: it was already resent as %s (%s, %s); another resend may reach the customer twice; use --force to send it again anyway",
				rowLabel(orig), earlier[0].Key, earlier[0].ID, earlier[0].State)
		}
	}
	if orig.Payload == nil {
		return fmt.Errorf("cannot resend %s: its content was purged (msgq purge), so there is nothing to copy", rowLabel(orig))
	}
	// The copy goes out through the original's identity: one no longer
	// configured would leave it queued forever, claimed by no drain.
	if _, ok := a.cfg.Identities[orig.Identity]; !ok && existing == nil {
		return unknownIdentity(orig.Identity, a.cfg.Identities)
	}
	p := &store.EnqueueParams{
		Tenant: orig.Tenant, Key: o.key, To: orig.To, Channel: orig.Channel, Identity: orig.Identity,
		Purpose: orig.Purpose, TriggerRef: orig.TriggerRef, Lane: orig.Lane, Payload: *orig.Payload, ResendOf: orig.ID,
	}
	res, err := st.MessageEnqueue(ctx, p)
	if err != nil {
		return err
	}
	m := res.Message
	if m.ResendOf != orig.ID {
		// Taken meanwhile by a message with the same content.
		return &resendConflictError{o.key, m.ID, rowLabel(orig)}
	}
	a.log.Debug("resent", "id", m.ID, "key", m.Key, "resend_of", orig.ID, "to", recipient.Mask(m.Channel, m.To), "replayed", res.Replayed)
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, sendResult{m, res.Replayed})
	}
	verb := "enqueued"
	if res.Replayed {
		verb = "replayed"
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "STATE", "TO", "RESEND OF", "RESULT"},
		[][]string{{m.ID, m.Key, string(m.State), m.To, m.ResendOf, verb}})
}

// resendAllowed says whether orig may be sent again, given the flags: the
// table in the command's help.
func resendAllowed(orig *store.Message, o *resendOptions) error {
	refuse := func(why string) error {
		return refusedf(state.ErrRefused, "cannot resend %s: it is %s; %s", rowLabel(orig), stateLabel(orig), why)
	}
	switch orig.State {
	case state.Failed:
		if orig.MaybeSent && orig.Reason != state.Resolved && !o.acceptRisk {
			return refuse("an earlier call's answer was lost (maybe_sent), so it may have reached the phone and the customer may get it twice; resend with --accept-duplicate-risk if that is acceptable")
		}
		return nil
	case state.Unknown:
		if !o.acceptRisk {
			return refuse("its first send may have reached the phone, so the customer may get it twice; find out first (msgq reconcile, msgq resolve --as failed) or resend with --accept-duplicate-risk")
		}
		return nil
	case state.Sent, state.Delivered, state.Read:
		if !o.force {
			return refuse("the provider accepted it, so the customer has it or will; resend with --force to send it again anyway")
		}
		return nil
	case state.Queued:
		return refuse("it may still go out; cancel it first (msgq cancel) if it must not")
	case state.Sending:
		return refuse("a drain may be sending it right now; wait for its outcome (msgq stuck, msgq reconcile)")
	}
	return refuse("msgq does not know this state")
}
