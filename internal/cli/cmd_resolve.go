package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type resolveOptions struct {
	ref    string
	as     string
	note   string
	by     string
	tenant string // bound to the tenant setting (flag > env > config)
}

func (o *resolveOptions) Validate() error {
	switch {
	case o.as == "":
		return usagef("--as is required: sent (it reached the provider) or failed (it did not)")
	case o.as != string(state.Sent) && o.as != string(state.Failed):
		return usagef("--as must be sent or failed (got %q)", o.as)
	case strings.TrimSpace(o.note) == "":
		return usagef("--note is required: say why (it is kept in the message's history)")
	case strings.TrimSpace(o.by) == "":
		return usagef("--by is required: no operating-system user to name (give --by NAME)")
	}
	return nil
}

func newResolveCmd(a *app) *cobra.Command {
	o := &resolveOptions{}
	cmd := &cobra.Command{
		Use:   "resolve ID|KEY --as sent|failed --note TEXT",
		Short: "Record a person's verdict on a message nobody knows the outcome of",
		Long: `Record an operator's verdict on an uncertain message: one in unknown (a call may
have reached the phone and no evidence says so), or one still in sending whose
drain vanished (its lease is over: it ended at least ` + store.TakeoverMargin.String() + ` ago, the takeover
margin that lets a drain which checked its lease just before the end finish
its call; msgq stuck lists it then).

--as sent: it went out (the customer has it). --as failed: it did not, and the
row becomes failed(resolved); only then is 'msgq resend' allowed without
--accept-duplicate-risk.

The verdict, the note and who gave it (--by, default the operating-system user)
go into the row's history and its resolution. Every other state is refused:
finished rows (sent, failed, delivered, read) are settled, a queued row has not
gone out (use msgq cancel), and a sending row whose lease is still live belongs
to the drain that holds it. A refusal is one line naming the row and its
state; it exits 1 and writes nothing.

` + exitStatusHelp,
		Example: `  msgq resolve order-1001-shipped --as sent --note "customer confirmed on the phone"
  msgq resolve 01JD5Q3XK0M9T4W8Y2B6C1N7PZ --as failed --note "provider support: never accepted" --by alice`,
		Args: exactArgs(1, "one message id or key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = args[0]
			if !cmd.Flags().Changed("by") {
				o.by = osUser()
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return runResolve(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.as, "as", "", "the verdict: sent or failed")
	f.StringVar(&o.note, "note", "", "why (required; kept in the history)")
	f.StringVar(&o.by, "by", "", "who decides (default: the operating-system user, else $USER)")
	f.StringVar(&o.tenant, "tenant", "", "tenant of the key (default \"default\") [MSGQ_TENANT]")
	return cmd
}

// operatorResult is what resolve and cancel print with -o json: the row as
// it is now, plus the state it was in.
type operatorResult struct {
	*store.Message
	From state.State `json:"from"`
}

func runResolve(ctx context.Context, a *app, o *resolveOptions) error {
	st, err := a.store(ctx)
	if err != nil {
		return err
	}
	m, err := messageByRef(ctx, st, a.cfg.Tenant, o.ref)
	if err != nil {
		return err
	}
	verdict := state.State(o.as)
	ev := state.Event{Kind: state.Resolve, Status: verdict}
	if err := machineAllows("resolve", m, ev); err != nil {
		return err
	}
	resolution := fmt.Sprintf("%s by %s: %s", verdict, strings.TrimSpace(o.by), strings.TrimSpace(o.note))
	after, err := st.MessageTransition(ctx, &store.TransitionParams{
		ID: m.ID, From: m.State, Event: ev, Source: store.SourceOperator, Detail: resolution, Resolution: resolution,
	})
	if err != nil {
		return transitionError("resolve", m, err)
	}
	a.log.Debug("resolved", "id", m.ID, "key", m.Key, "from", m.State, "to", after.State)
	return printOperatorResult(a, m, after, resolution)
}

// printOperatorResult prints what resolve or cancel did: one row, from and
// to, and the recorded resolution.
func printOperatorResult(a *app, before, after *store.Message, what string) error {
	if a.cfg.Output == outJSON {
		return printJSON(a.ios.Out, operatorResult{after, before.State})
	}
	return printTable(a.ios.Out, []string{"ID", "KEY", "FROM", "TO", "RESOLUTION"},
		[][]string{{after.ID, after.Key, stateLabel(before), stateLabel(after), what}})
}

// messageByRef reads the row ref (an id or a key) of tenant, naming both
// when there is none.
func messageByRef(ctx context.Context, st store.Store, tenant, ref string) (*store.Message, error) {
	m, err := st.MessageGet(ctx, tenant, ref)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("no message with id or key %q in tenant %q: %w", ref, tenant, err)
	}
	return m, err
}

// rowLabel names a row for a one-line message: its key and id.
func rowLabel(m *store.Message) string { return fmt.Sprintf("%s (%s)", m.Key, m.ID) }

// machineAllows asks the state machine (pure, no I/O) whether ev may apply to
// the row as read, so that a refusal names the row and its state. The
// store asks the machine again when it writes, conditionally on that state.
func machineAllows(verb string, m *store.Message, ev state.Event) error {
	if _, err := state.Transition(m.State, ev); err != nil {
		var re *state.RefusedError
		if errors.As(err, &re) {
			return refusedf(state.ErrRefused, "cannot %s %s: it is %s; %s", verb, rowLabel(m), stateLabel(m), re.Why)
		}
		return err
	}
	return nil
}

// transitionError turns a store's refusal of an operator's transition into
// one line that says what to do.
func transitionError(verb string, m *store.Message, err error) error {
	switch {
	case errors.Is(err, store.ErrLeaseLive):
		until, over := "-", "-"
		if m.LeaseUntil != nil {
			until, over = stamp(*m.LeaseUntil), stamp(m.LeaseUntil.Add(store.TakeoverMargin))
		}
		return refusedf(store.ErrLeaseLive, "cannot %s %s: it is sending and its drain's lease is live until %s, taken over only %s later (%s): the call may still be answered; wait until then (msgq stuck lists the row then)",
			verb, rowLabel(m), until, store.TakeoverMargin, over)
	case errors.Is(err, store.ErrStale):
		return refusedf(store.ErrStale, "cannot %s %s: it changed while this ran (it was %s); look again with msgq show %s",
			verb, rowLabel(m), stateLabel(m), m.ID)
	case errors.Is(err, state.ErrRefused):
		return fmt.Errorf("cannot %s %s: %w", verb, rowLabel(m), err)
	}
	return err
}

// osUser is the operating-system user, for --by: os/user, else $USER
// (else $USERNAME on Windows), else "".
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return os.Getenv("USERNAME")
}

// refusedError is an operator command's refusal: one line for a person,
// matching kind (state.ErrRefused, store.ErrLeaseLive, store.ErrStale) for
// errors.Is. It exits 1: nothing was written.
type refusedError struct {
	msg  string
	kind error
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.kind }

func refusedf(kind error, format string, a ...any) error {
	return &refusedError{fmt.Sprintf(format, a...), kind}
}
