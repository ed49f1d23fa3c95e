// Package operator carries out a person's verdicts on single messages:
// resolve (an uncertain row went out, or did not), cancel (a queued row
// must not go out) and resend (a new logical send copied from an earlier
// one). Each reads the row, asks the state machine first so that a
// refusal names the row and its state, and writes through the store,
// which asks the machine again conditionally on the state it read. The
// msgq resolve, cancel and resend commands are shells around it: flags,
// Options+Validate, output.
package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// RefusedError is a verdict refused: one line for a person, matching Kind
// (state.ErrRefused, store.ErrLeaseLive, store.ErrStale) for errors.Is.
// Nothing was written.
type RefusedError struct {
	Msg  string
	Kind error
}

func (e *RefusedError) Error() string { return e.Msg }
func (e *RefusedError) Unwrap() error { return e.Kind }

func refusedf(kind error, format string, a ...any) error {
	return &RefusedError{fmt.Sprintf(format, a...), kind}
}

// ErrMaybeSent is the kind of a cancel refused because the queued row is
// flagged maybe_sent: an earlier call's answer was lost, so the message
// may already have reached the phone, and failed(canceled) would read as
// "never sent". It is a state.ErrRefused too (exit 1, as every refused
// verdict); CancelConfig.AcceptMaybeSent lifts it.
var ErrMaybeSent = fmt.Errorf("%w: it may already have gone out (maybe_sent)", state.ErrRefused)

// ConflictError is a resend's new key that names a message other than a
// resend of this original: a key reused for another message, matching
// store.ErrConflict for errors.Is.
type ConflictError struct {
	Key, ExistingID, Original string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("key %q is already used by message %s, which is not a resend of %s", e.Key, e.ExistingID, e.Original)
}

func (e *ConflictError) Is(target error) bool { return target == store.ErrConflict }

// OwnKeyError is a resend under the original's own key: bad input, refused
// before anything is written.
type OwnKeyError struct{ Key string }

func (e *OwnKeyError) Error() string {
	return fmt.Sprintf("--key %q is the original's own key: a resend is a new logical send and needs a new key", e.Key)
}

// Result is what resolve or cancel did: the row as read, the row as
// written, and the resolution recorded.
type Result struct {
	Before, After *store.Message
	Resolution    string
}

// ResolveConfig is one resolve: the row (an id or key of Tenant), the
// verdict (state.Sent or state.Failed), why, and who.
type ResolveConfig struct {
	Store  store.Store
	Tenant string
	Ref    string
	As     state.State
	Note   string
	By     string
}

// Resolve records a person's verdict on an uncertain row (unknown, or
// sending with its lease over).
func Resolve(ctx context.Context, cfg ResolveConfig) (Result, error) {
	m, err := messageByRef(ctx, cfg.Store, cfg.Tenant, cfg.Ref)
	if err != nil {
		return Result{}, err
	}
	ev := state.Event{Kind: state.Resolve, Status: cfg.As}
	if err := machineAllows("resolve", m, ev); err != nil {
		return Result{}, err
	}
	resolution := fmt.Sprintf("%s by %s: %s", cfg.As, strings.TrimSpace(cfg.By), strings.TrimSpace(cfg.Note))
	after, err := cfg.Store.MessageTransition(ctx, &store.TransitionParams{
		ID: m.ID, From: m.State, Event: ev, Source: store.SourceOperator, Detail: resolution, Resolution: resolution,
	})
	if err != nil {
		return Result{}, transitionError("resolve", m, err)
	}
	return Result{Before: m, After: after, Resolution: resolution}, nil
}

// CancelConfig is one cancel: the row, who, and why (optional).
type CancelConfig struct {
	Store  store.Store
	Tenant string
	Ref    string
	Note   string
	By     string
	// AcceptMaybeSent allows canceling a queued row flagged maybe_sent,
	// which may already have reached the phone: the cancel stops further
	// attempts, recalls nothing, and says so in the resolution.
	AcceptMaybeSent bool
}

// Cancel stops a queued row. A queued row has not gone out unless it is
// flagged maybe_sent (queued again after a call whose answer was lost, for
// a provider that deduplicates by key): that one is refused with
// ErrMaybeSent unless cfg.AcceptMaybeSent.
func Cancel(ctx context.Context, cfg CancelConfig) (Result, error) {
	m, err := messageByRef(ctx, cfg.Store, cfg.Tenant, cfg.Ref)
	if err != nil {
		return Result{}, err
	}
	ev := state.Event{Kind: state.Cancel}
	if err := machineAllows("cancel", m, ev); err != nil {
		return Result{}, err
	}
	if m.MaybeSent && !cfg.AcceptMaybeSent {
		return Result{}, refusedf(ErrMaybeSent, "cannot cancel %s: it is queued again after an earlier call's answer was lost (maybe_sent), so it may already have reached the phone; "+
			"a cancel stops further attempts but recalls nothing, and the row would read failed(canceled). Its provider deduplicates by key, so letting it go out sends nothing twice; "+
			"cancel with --accept-maybe-sent if it must stop anyway", rowLabel(m))
	}
	what := "canceled by " + strings.TrimSpace(cfg.By)
	if m.MaybeSent {
		what += " (maybe_sent: it may already have gone out)"
	}
	if n := strings.TrimSpace(cfg.Note); n != "" {
		what += ": " + n
	}
	after, err := cfg.Store.MessageTransition(ctx, &store.TransitionParams{
		ID: m.ID, From: m.State, Event: ev, Source: store.SourceOperator, Detail: what, Resolution: what,
	})
	if err != nil {
		return Result{}, transitionError("cancel", m, err)
	}
	return Result{Before: m, After: after, Resolution: what}, nil
}

// ResendConfig is one resend: the original, the new send's key, and what
// the person accepts.
type ResendConfig struct {
	Store  store.Store
	Tenant string
	Ref    string
	Key    string
	// AcceptRisk allows resending an unknown row (or a failed one flagged
	// maybe_sent): the customer may get it twice.
	AcceptRisk bool
	// Force allows resending a row the provider accepted, and a second
	// resend.
	Force bool
	// CheckIdentity says whether the original's identity can still send
	// (nil: it can); its error is returned as is. A copy through an
	// identity no longer configured would stay queued, claimed by no drain.
	CheckIdentity func(name string) error
	// Text and Params, when set, replace the original's text or template
	// parameters (a verification step resent with a new code: the old one
	// is worthless); ExpiresIn gives the new send a deadline of its own,
	// counted on the store's clock (the original's has usually passed).
	Text      string
	Params    []string
	ExpiresIn time.Duration
}

// ResendResult is the new row, and whether it was a replay of this very
// resend made earlier (nothing written), or that resend queued again
// after it was refused for a policy reason before any call (Revived:
// store.EnqueueResult's).
type ResendResult struct {
	Original *store.Message
	Message  *store.Message
	Replayed bool
	Revived  bool
}

// Resend enqueues a new logical send copied from the original, linked to
// it by resend_of.
func Resend(ctx context.Context, cfg ResendConfig) (ResendResult, error) {
	st := cfg.Store
	orig, err := messageByRef(ctx, st, cfg.Tenant, cfg.Ref)
	if err != nil {
		return ResendResult{}, err
	}
	if cfg.Key == orig.Key {
		return ResendResult{}, &OwnKeyError{cfg.Key}
	}
	// A replay of this very resend returns the row it made, whatever the
	// original's state has become since; a key held by any other message
	// is a conflict. MessageEnqueue decides both again atomically below.
	existing, err := st.MessageGet(ctx, orig.Tenant, cfg.Key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		existing = nil
	case err != nil:
		return ResendResult{}, err
	}
	if existing != nil && existing.ResendOf != orig.ID {
		return ResendResult{}, &ConflictError{cfg.Key, existing.ID, rowLabel(orig)}
	}
	if existing == nil {
		if err := resendAllowed(orig, cfg); err != nil {
			return ResendResult{}, err
		}
		// A second resend (under yet another key) sends the content again
		// on top of the first resend: that is a duplicate for the
		// customer unless someone means it.
		earlier, err := st.MessageList(ctx, &store.ListParams{Tenant: orig.Tenant, ResendOf: orig.ID, Limit: 1})
		if err != nil {
			return ResendResult{}, err
		}
		if len(earlier) > 0 && !cfg.Force {
			return ResendResult{}, refusedf(state.ErrRefused, "cannot resend %s: it was already resent as %s (%s, %s); another resend may reach the customer twice; use --force to send it again anyway",
				rowLabel(orig), earlier[0].Key, earlier[0].ID, earlier[0].State)
		}
	}
	if orig.Payload == nil {
		return ResendResult{}, fmt.Errorf("cannot resend %s: its content was purged (msgq purge), so there is nothing to copy", rowLabel(orig))
	}
	if cfg.CheckIdentity != nil && existing == nil {
		if err := cfg.CheckIdentity(orig.Identity); err != nil {
			return ResendResult{}, err
		}
	}
	payload := *orig.Payload
	switch {
	case cfg.Text != "" && payload.Text == "":
		return ResendResult{}, &store.InvalidError{Field: "text", Msg: fmt.Sprintf("%s sends template %s, not a text: give --param to change its parameters", rowLabel(orig), payload.Template)}
	case cfg.Params != nil && payload.Text != "":
		return ResendResult{}, &store.InvalidError{Field: "params", Msg: fmt.Sprintf("%s sends a text, not a template: give --text to change it", rowLabel(orig))}
	case cfg.ExpiresIn < 0:
		return ResendResult{}, &store.InvalidError{Field: "expires_in", Msg: "puts the expiry in the past"}
	case cfg.Text != "":
		payload.Text = cfg.Text
	case cfg.Params != nil:
		payload.Params = slices.Clone(cfg.Params)
	}
	p := &store.EnqueueParams{
		Tenant: orig.Tenant, Key: cfg.Key, To: orig.To, Channel: orig.Channel, Identity: orig.Identity,
		Purpose: orig.Purpose, TriggerRef: orig.TriggerRef, Lane: orig.Lane, Payload: payload, ResendOf: orig.ID,
		ExpiresIn: cfg.ExpiresIn,
	}
	res, err := st.MessageEnqueue(ctx, p)
	if err != nil {
		return ResendResult{}, err
	}
	m := res.Message
	if m.ResendOf != orig.ID {
		// Taken meanwhile by a message with the same content.
		return ResendResult{}, &ConflictError{cfg.Key, m.ID, rowLabel(orig)}
	}
	return ResendResult{Original: orig, Message: m, Replayed: res.Replayed, Revived: res.Revived}, nil
}

// resendAllowed says whether orig may be sent again, given the flags: the
// table in msgq resend's help.
func resendAllowed(orig *store.Message, cfg ResendConfig) error {
	refuse := func(why string) error {
		return refusedf(state.ErrRefused, "cannot resend %s: it is %s; %s", rowLabel(orig), stateLabel(orig), why)
	}
	if store.NeverAdmitted(orig) {
		// Its columns hold the input PostgreSQL's enqueue() took in, not a
		// send checked and normalised by the admission: sending them
		// would skip every check msgq send makes.
		return refuse("it was taken in by enqueue() and never admitted, so it holds unchecked input; send it again with a corrected enqueue() call or msgq send")
	}
	switch orig.State {
	case state.Failed:
		if orig.MaybeSent && orig.Reason != state.Resolved && !cfg.AcceptRisk {
			return refuse("an earlier call's answer was lost (maybe_sent), so it may have reached the phone and the customer may get it twice; resend with --accept-duplicate-risk if that is acceptable")
		}
		return nil
	case state.Unknown:
		if !cfg.AcceptRisk {
			return refuse("its first send may have reached the phone, so the customer may get it twice; find out first (msgq reconcile, msgq resolve --as failed) or resend with --accept-duplicate-risk")
		}
		return nil
	case state.Sent, state.Delivered, state.Read:
		if !cfg.Force {
			return refuse("the provider accepted it, so the customer has it or will; resend with --force to send it again anyway")
		}
		return nil
	case state.Queued:
		return refuse("it may still go out; cancel it first (msgq cancel) if it must not")
	case state.Sending:
		return refuse("a drain may be sending it right now; wait for its outcome (msgq stuck, msgq reconcile)")
	case state.Intake:
		return refuse("it waits for its admission (msgq drain or msgq serve admits it); cancel it first (msgq cancel) if it must not go out")
	}
	return refuse("msgq does not know this state")
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

// stateLabel is a row's state with its reason, as msgq's tables show it:
// failed(canceled).
func stateLabel(m *store.Message) string {
	if m.Reason != state.NoReason {
		return string(m.State) + "(" + string(m.Reason) + ")"
	}
	return string(m.State)
}

// stamp is a time as msgq's tables show it: UTC, second precision,
// RFC 3339.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

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
