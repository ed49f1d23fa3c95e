package operator_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/operator"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

var ctx = context.Background()

type env struct {
	t   *testing.T
	st  store.Store
	clk *storetest.Clock
}

// newEnv is a real SQLite store in a temporary directory, on a settable
// clock (leases expire by moving it, not by sleeping).
func newEnv(t *testing.T) *env {
	t.Helper()
	clk := storetest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &env{t: t, st: st, clk: clk}
}

func (e *env) queued(key string) *store.Message {
	e.t.Helper()
	p := storetest.Params(key)
	p.Identity = key // so that a claim takes this row alone
	r, err := e.st.MessageEnqueue(ctx, &p)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Message
}

func (e *env) sending(key string, lease time.Duration) *store.Message {
	e.t.Helper()
	m := e.queued(key)
	cs, err := e.st.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: lease, Limit: 1, Identities: []string{key}})
	if err != nil || len(cs) != 1 || cs[0].ID != m.ID {
		e.t.Fatalf("claim %s: %v %+v", key, err, cs)
	}
	return &cs[0].Message
}

func (e *env) unknown(key string) *store.Message {
	e.t.Helper()
	m := e.sending(key, time.Hour)
	after, err := e.st.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sending,
		Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain, Detail: "test: answer lost", LeaseOwner: "drain-1"})
	if err != nil {
		e.t.Fatal(err)
	}
	return after
}

func (e *env) get(id string) *store.Message {
	e.t.Helper()
	m, err := e.st.MessageGet(ctx, "", id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) historyLen(id string) int {
	e.t.Helper()
	h, err := e.st.MessageHistory(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(h)
}

// refused checks err is a *RefusedError of kind, naming the row, and that
// the row was not written.
func (e *env) refused(err error, kind error, m *store.Message, hist int, want string) {
	e.t.Helper()
	var re *operator.RefusedError
	if !errors.As(err, &re) || !errors.Is(err, kind) || !strings.Contains(err.Error(), m.Key) || !strings.Contains(err.Error(), want) {
		e.t.Errorf("%s: %v, want a refusal (%v) naming the row and %q", m.Key, err, kind, want)
	}
	if now := e.get(m.ID); now.State != m.State || e.historyLen(m.ID) != hist {
		e.t.Errorf("%s: a refusal wrote: it is %s", m.Key, now.State)
	}
}

func TestResolveRecordsAVerdictOnlyOnAnUncertainRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	unk := e.unknown("unk")
	res, err := operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Ref: unk.Key, As: state.Failed, Note: " never accepted ", By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Before.State != state.Unknown || res.After.State != state.Failed || res.After.Reason != state.Resolved ||
		res.Resolution != "failed by alice: never accepted" {
		t.Errorf("resolve: %s -> %s(%s), %q", res.Before.State, res.After.State, res.After.Reason, res.Resolution)
	}
	if got := e.get(unk.ID); got.Resolution != res.Resolution {
		t.Errorf("stored resolution %q", got.Resolution)
	}

	// A queued row has not gone out; a sending row with a live lease
	// belongs to its drain; a settled row is settled.
	q := e.queued("q")
	e.refused(errOf(operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Ref: q.ID, As: state.Sent, Note: "x", By: "a"})),
		state.ErrRefused, q, e.historyLen(q.ID), "it is queued")
	live := e.sending("live", time.Hour)
	e.refused(errOf(operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Ref: live.ID, As: state.Sent, Note: "x", By: "a"})),
		store.ErrLeaseLive, live, e.historyLen(live.ID), "lease is live until")
	done := e.get(unk.ID)
	e.refused(errOf(operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Ref: done.ID, As: state.Sent, Note: "x", By: "a"})),
		state.ErrRefused, done, e.historyLen(done.ID), "it is failed(resolved)")

	// Once its lease and the takeover margin are over, a sending row can
	// be resolved.
	exp := e.sending("expired", 10*time.Second)
	e.clk.Advance(10*time.Second + store.TakeoverMargin)
	if res, err := operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Ref: exp.ID, As: state.Sent, Note: "seen", By: "bob"}); err != nil || res.After.State != state.Sent {
		t.Errorf("resolve of an expired lease: %v", err)
	}

	// No such row: a lookup that failed, naming ref and tenant.
	_, err = operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Tenant: "default", Ref: "nope", As: state.Sent, Note: "x", By: "a"})
	if !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"nope" in tenant "default"`) {
		t.Errorf("missing row: %v", err)
	}
}

func errOf[T any](_ T, err error) error { return err }

func TestCancelStopsOnlyAQueuedRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queued("q")
	res, err := operator.Cancel(ctx, operator.CancelConfig{Store: e.st, Ref: q.ID, By: "bob", Note: "refunded"})
	if err != nil || res.After.State != state.Failed || res.After.Reason != state.Canceled || res.Resolution != "canceled by bob: refunded" {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	q2 := e.queued("q2")
	if res, err := operator.Cancel(ctx, operator.CancelConfig{Store: e.st, Ref: q2.Key, By: "bob"}); err != nil || res.Resolution != "canceled by bob" {
		t.Errorf("cancel without a note: %+v %v", res, err)
	}
	unk := e.unknown("unk")
	e.refused(errOf(operator.Cancel(ctx, operator.CancelConfig{Store: e.st, Ref: unk.ID, By: "bob"})),
		state.ErrRefused, unk, e.historyLen(unk.ID), "it is unknown")
}

// TestCancelOfAMaybeSentRowNeedsConsent: a row queued again after a call
// whose answer was lost (maybe_sent) may already be on the phone; cancel
// refuses it (ErrMaybeSent, a state.ErrRefused) and writes nothing unless
// AcceptMaybeSent, and then its resolution says so.
func TestCancelOfAMaybeSentRowNeedsConsent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.sending("ms", time.Hour)
	if _, err := e.st.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sending,
		Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, Detail: "test: answer lost, provider dedupes", LeaseOwner: "drain-1", MaybeSent: true}); err != nil {
		t.Fatal(err)
	}
	q := e.get(m.ID)
	if q.State != state.Queued || !q.MaybeSent {
		t.Fatalf("seed: %s maybe_sent %v", q.State, q.MaybeSent)
	}
	err := errOf(operator.Cancel(ctx, operator.CancelConfig{Store: e.st, Ref: q.Key, By: "bob"}))
	e.refused(err, operator.ErrMaybeSent, q, e.historyLen(q.ID), "(maybe_sent), so it may already have reached the phone")
	if !errors.Is(err, state.ErrRefused) || !strings.Contains(err.Error(), "--accept-maybe-sent") {
		t.Errorf("refusal %v: want a state.ErrRefused naming --accept-maybe-sent", err)
	}
	res, err := operator.Cancel(ctx, operator.CancelConfig{Store: e.st, Ref: q.Key, By: "bob", Note: "refunded", AcceptMaybeSent: true})
	if err != nil || res.After.State != state.Failed || res.After.Reason != state.Canceled ||
		res.Resolution != "canceled by bob (maybe_sent: it may already have gone out): refunded" {
		t.Fatalf("accepted cancel: %+v %v", res, err)
	}
}

func TestResendFollowsTheTableAndReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	unk := e.unknown("unk")
	cfg := operator.ResendConfig{Store: e.st, Ref: unk.ID, Key: "unk-r2"}

	// Unknown: only with the duplicate risk accepted.
	e.refused(errOf(operator.Resend(ctx, cfg)), state.ErrRefused, unk, e.historyLen(unk.ID), "may have reached the phone")
	cfg.AcceptRisk = true
	res, err := operator.Resend(ctx, cfg)
	if err != nil || res.Replayed || res.Message.ResendOf != unk.ID || res.Message.State != state.Queued || res.Message.Key != "unk-r2" {
		t.Fatalf("resend: %+v %v", res, err)
	}
	// The same resend again is a replay of the row it made.
	again, err := operator.Resend(ctx, cfg)
	if err != nil || !again.Replayed || again.Message.ID != res.Message.ID {
		t.Errorf("resend again: %+v %v", again, err)
	}
	// A second resend under another key needs --force.
	cfg.Key = "unk-r3"
	e.refused(errOf(operator.Resend(ctx, cfg)), state.ErrRefused, unk, e.historyLen(unk.ID), "already resent as unk-r2")

	// The original's own key is bad input; a key held by another message
	// is a conflict.
	var own *operator.OwnKeyError
	if _, err := operator.Resend(ctx, operator.ResendConfig{Store: e.st, Ref: unk.ID, Key: unk.Key, AcceptRisk: true}); !errors.As(err, &own) {
		t.Errorf("own key: %v, want *OwnKeyError", err)
	}
	other := e.queued("other")
	failed := e.unknown("to-fail")
	if _, err := operator.Resolve(ctx, operator.ResolveConfig{Store: e.st, Ref: failed.ID, As: state.Failed, Note: "n", By: "a"}); err != nil {
		t.Fatal(err)
	}
	var ce *operator.ConflictError
	_, err = operator.Resend(ctx, operator.ResendConfig{Store: e.st, Ref: failed.ID, Key: other.Key})
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) || ce.ExistingID != other.ID {
		t.Errorf("key of another message: %v, want a conflict naming %s", err, other.ID)
	}

	// A failed(resolved) row is resent without flags, unless its identity
	// can no longer send.
	gone := errors.New("identity to-fail is not configured")
	_, err = operator.Resend(ctx, operator.ResendConfig{Store: e.st, Ref: failed.ID, Key: "fail-r2",
		CheckIdentity: func(string) error { return gone }})
	if !errors.Is(err, gone) {
		t.Errorf("resend through a gone identity: %v", err)
	}
	if n, err := e.st.MessageList(ctx, &store.ListParams{ResendOf: failed.ID, Limit: 10}); err != nil || len(n) != 0 {
		t.Errorf("a refused resend wrote %d rows (%v)", len(n), err)
	}
	if res, err := operator.Resend(ctx, operator.ResendConfig{Store: e.st, Ref: failed.ID, Key: "fail-r2",
		CheckIdentity: func(string) error { return nil }}); err != nil || res.Message.ResendOf != failed.ID {
		t.Errorf("resend of failed(resolved): %+v %v", res, err)
	}

	// Queued and sending rows are never resent.
	live := e.sending("live", time.Hour)
	e.refused(errOf(operator.Resend(ctx, operator.ResendConfig{Store: e.st, Ref: live.ID, Key: "live-r2", AcceptRisk: true, Force: true})),
		state.ErrRefused, live, e.historyLen(live.ID), "a drain may be sending it right now")
}

// TestAResendCanCarryNewContentAndADeadlineOfItsOwn: a verification code
// resent as a new code: --param replaces a template's parameters (--text a
// text's words), --expires-in gives the copy its own deadline on the
// store's clock. The same resend again replays; other content under the
// same new key conflicts; changing what the original does not have is bad
// input, and nothing is written.
func TestAResendCanCarryNewContentAndADeadlineOfItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orig := e.unknown("otp-1")
	cfg := operator.ResendConfig{Store: e.st, Ref: orig.ID, Key: "otp-1-g2", AcceptRisk: true,
		Params: []string{"Ada", "654321"}, ExpiresIn: 10 * time.Minute}
	res, err := operator.Resend(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Message
	if m.Payload == nil || m.Payload.Template != "order_update" || len(m.Payload.Params) != 2 || m.Payload.Params[1] != "654321" {
		t.Errorf("the resend's payload %+v, want the template with the new parameters", m.Payload)
	}
	// On the store's clock (this store's is fixed): 10 minutes after the
	// resend was written.
	if m.ExpiresAt == nil || m.ExpiresAt.Sub(m.CreatedAt) != 10*time.Minute {
		t.Errorf("the resend expires at %v, created at %v: want 10 minutes later", m.ExpiresAt, m.CreatedAt)
	}
	if o := e.get(orig.ID); o.Payload.Params[1] != "1001" {
		t.Errorf("the original changed: %+v", o.Payload)
	}
	if again, err := operator.Resend(ctx, cfg); err != nil || !again.Replayed || again.Message.ID != m.ID {
		t.Errorf("the same resend again: %+v %v, want a replay", again, err)
	}
	other := cfg
	other.Params = []string{"Ada", "111111"}
	if _, err := operator.Resend(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Errorf("other content under the same new key: %v, want a conflict", err)
	}
	bad := operator.ResendConfig{Store: e.st, Ref: orig.ID, Key: "otp-1-g3", AcceptRisk: true, Force: true, Text: "Your code is 7"}
	var ie *store.InvalidError
	if _, err := operator.Resend(ctx, bad); !errors.As(err, &ie) || ie.Field != "text" {
		t.Errorf("--text on a template row: %v, want an invalid text", err)
	}
	if _, err := e.st.MessageGet(ctx, "", "otp-1-g3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused resend wrote a row: %v", err)
	}
}
