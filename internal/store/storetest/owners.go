package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// ownersOf is MessageProviderIDOwners' answer as "pid=key" pairs, in its
// order.
func ownersOf(t *testing.T, s store.Store, identity string, ids []string) []string {
	t.Helper()
	var out []string
	for _, o := range must[[]store.ProviderIDOwner](t)(s.MessageProviderIDOwners(whCtx, identity, ids)) {
		out = append(out, o.ProviderID+"="+o.Key)
	}
	return out
}

// testProviderIDOwners: reconcile asks which of the messages a provider
// search listed other rows already own (issue 24). Provider ids are
// unique per identity, across tenants, as evidence matching reads them.
func testProviderIDOwners(t *testing.T, h Harness) {
	t.Run("the rows of the identity recording each id, of any tenant; a collision names both", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		a := w.sentAs("a", "sms-us", "+15551110001", "SM1")
		w.sentAs("b", "sms-us", "+15551110001", "SM2")
		w.sentAs("other-identity", "sms-eu", "+15551110001", "SM1")
		w.sentAs("c1", "sms-us", "+15551110002", "SM3")
		w.sentAs("c2", "sms-us", "+15551110003", "SM3") // the provider issued SM3 twice: a collision
		// A row of another tenant, resent from a: tenant, key and resend
		// link come back.
		p := Params("t2-1")
		p.Tenant, p.Identity, p.To, p.ResendOf = "acme", "sms-us", "+15551110004", a.ID
		m := must[*store.EnqueueResult](t)(w.s.MessageEnqueue(whCtx, &p)).Message
		if cs := must[[]store.Claimed](t)(w.s.MessageClaim(whCtx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1})); len(cs) != 1 {
			t.Fatalf("claimed %+v", cs)
		}
		w.accept(m.ID, "SM5")
		w.claimed("no-pid") // in sending, no provider id yet

		got := ownersOf(t, w.s, "sms-us", []string{"SM5", "SM4", "SM3", "SM2", "SM1", ""})
		if want := []string{"SM1=a", "SM2=b", "SM3=c1", "SM3=c2", "SM5=t2-1"}; !slices.Equal(got, want) {
			t.Errorf("owners %q, want %q", got, want)
		}
		os := must[[]store.ProviderIDOwner](t)(w.s.MessageProviderIDOwners(whCtx, "sms-us", []string{"SM5"}))
		if len(os) != 1 || os[0].ID != m.ID || os[0].Tenant != "acme" || os[0].ResendOf != a.ID || os[0].State != state.Sent {
			t.Errorf("SM5's owner %+v, want t2-1 of acme, a resend of %s, sent", os, a.ID)
		}
		if got := ownersOf(t, w.s, "sms-eu", []string{"SM1", "SM2"}); !slices.Equal(got, []string{"SM1=other-identity"}) {
			t.Errorf("sms-eu's owners %q", got)
		}
		if got := ownersOf(t, w.s, "sms-us", nil); len(got) != 0 {
			t.Errorf("no ids: %q", got)
		}
		if got := ownersOf(t, w.s, "nobody", []string{"SM1"}); len(got) != 0 {
			t.Errorf("an identity without rows: %q", got)
		}
		// A listing of thousands (Twilio's five pages of a thousand): the
		// owned ones anywhere in it are found.
		ids := make([]string, 5000)
		for i := range ids {
			ids[i] = fmt.Sprintf("SMX%04d", i)
		}
		ids[0], ids[2500], ids[4999] = "SM2", "SM1", "SM5"
		if got := ownersOf(t, w.s, "sms-us", ids); !slices.Equal(got, []string{"SM1=a", "SM2=b", "SM5=t2-1"}) {
			t.Errorf("owners among 5000 ids: %q", got)
		}
	})
}

// testNotes: reconcile's note on an unknown row is kept on the row,
// without touching its state, age or history, and stuck shows it.
func testNotes(t *testing.T, h Harness) {
	t.Run("kept on the row, shown by stuck, the row otherwise untouched; a row that moved on gets none", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		unk := w.claimed("unk")
		must[*store.Message](t)(w.s.MessageTransition(whCtx, &store.TransitionParams{ID: unk.ID, From: state.Sending,
			LeaseOwner: "drain-1", Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain}))
		sent := w.sent("sent", "wamid.1")
		before := w.get(unk.ID)
		hist := must[[]store.HistoryEntry](t)(w.s.MessageHistory(whCtx, unk.ID))
		stuckNote := func() (string, bool) {
			t.Helper()
			ms := must[[]store.StuckMessage](t)(w.s.MessageStuck(whCtx, &store.StuckParams{State: state.Unknown}))
			for _, m := range ms {
				if m.ID == unk.ID {
					return m.Note, true
				}
			}
			return "", false
		}
		if note, ok := stuckNote(); !ok || note != "" {
			t.Fatalf("before any note: listed %v, note %q", ok, note)
		}

		w.clk.Advance(time.Minute)
		if err := w.s.MessageNoteMany(whCtx, []store.NoteParams{
			{ID: unk.ID, State: state.Unknown, Note: "first"},
			{ID: sent.ID, State: state.Unknown, Note: "not unknown: skipped"},
			{ID: "01JNOSUCHROW0000000000000", State: state.Unknown, Note: "no row: skipped"},
			{ID: unk.ID, State: state.Unknown, Note: "second"}, // the later of one row's wins
		}); err != nil {
			t.Fatal(err)
		}
		if note, ok := stuckNote(); !ok || note != "second" {
			t.Errorf("stuck: listed %v, note %q, want the later", ok, note)
		}
		after := w.get(unk.ID)
		if after.State != state.Unknown || !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("the row changed: %s at %v, was %s at %v", after.State, after.UpdatedAt, before.State, before.UpdatedAt)
		}
		if h2 := must[[]store.HistoryEntry](t)(w.s.MessageHistory(whCtx, unk.ID)); len(h2) != len(hist) {
			t.Errorf("history %+v, want the %d entries it had", h2, len(hist))
		}
		if got := w.get(sent.ID); got.State != state.Sent || len(must[[]store.HistoryEntry](t)(w.s.MessageHistory(whCtx, sent.ID))) != 3 {
			t.Errorf("the sent row: %+v", got)
		}
		// The counts by state (kept by triggers on SQLite) are untouched.
		if st := must[*store.Stats](t)(w.s.Stats(whCtx, &store.StatsParams{})); st.Unknown != 1 {
			t.Errorf("stats count %d unknown rows, want 1", st.Unknown)
		}
		if err := w.s.MessageNoteMany(whCtx, nil); err != nil {
			t.Errorf("no notes: %v", err)
		}
		must[*store.Message](t)(w.s.MessageTransition(whCtx, &store.TransitionParams{ID: unk.ID, From: state.Unknown,
			Event: state.Event{Kind: state.Evidence, Status: state.Sent}, Source: store.SourceReconcile}))
		if _, ok := stuckNote(); ok {
			t.Error("a sent row is still stuck")
		}
	})
}

// testNotesRace: a note written while another process settles the same
// row (an operator's verdict, a second reconcile's evidence) costs the
// settling write nothing: both succeed, the row is settled.
func testNotesRace(t *testing.T, h Harness) {
	t.Run("a note and a transition of the same row at once both succeed", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		const n = 40
		ids := make([]string, n)
		for i := range ids {
			m := w.claimed(fmt.Sprintf("race-%d", i))
			must[*store.Message](t)(w.s.MessageTransition(whCtx, &store.TransitionParams{ID: m.ID, From: state.Sending,
				LeaseOwner: "drain-1", Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain}))
			ids[i] = m.ID
		}
		other := h.Reopen(t, w.s)
		errs := make(chan error, 2*n)
		for _, id := range ids {
			go func() {
				errs <- w.s.MessageNoteMany(whCtx, []store.NoteParams{{ID: id, State: state.Unknown, Note: "left for a person"}})
			}()
			go func() {
				_, err := other.MessageTransitionMany(whCtx, []store.TransitionParams{{ID: id, From: state.Unknown,
					Event: state.Event{Kind: state.Evidence, Status: state.Sent}, Source: store.SourceReconcile}})
				errs <- err
			}()
		}
		for range 2 * n {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		for _, id := range ids {
			if m := w.get(id); m.State != state.Sent {
				t.Errorf("%s: %s, want sent", m.Key, m.State)
			}
		}
	})
}
