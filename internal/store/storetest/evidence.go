package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// sentAs is a row of identity to recipient that the provider accepted
// under pid (enqueued and claimed alone, as the only queued row).
func (w *wh) sentAs(key, identity, to, pid string) *store.Message {
	w.t.Helper()
	p := Params(key)
	p.Identity, p.To = identity, to
	m := must[*store.EnqueueResult](w.t)(w.s.MessageEnqueue(whCtx, &p)).Message
	cs := must[[]store.Claimed](w.t)(w.s.MessageClaim(whCtx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1}))
	if len(cs) != 1 || cs[0].ID != m.ID {
		w.t.Fatalf("claimed %+v, want %s", cs, key)
	}
	w.accept(m.ID, pid)
	return w.get(m.ID)
}

// statusOf is a WhatsApp status of pid as it came through identity.
func statusOf(identity, pid string, st state.State, sec int) store.StatusEvidence {
	s := status(pid, st, sec)
	s.Identity = identity
	s.DedupeKey = identity + "|" + s.DedupeKey // two numbers' statuses are two deliveries
	return s
}

// testEvidenceIdentity: evidence lands only on the message it is about
// (issue 12 §3). Provider ids are unique per identity, not globally.
func testEvidenceIdentity(t *testing.T, h Harness) {
	t.Run("the same provider id under two identities is two messages: each status and reply lands on its own row", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		a := w.sentAs("a", "demo-1", "+15551110001", "wamid.1")
		b := w.sentAs("b", "demo-2", "+15552220002", "wamid.1")
		// demo-2 gets delivered then read; demo-1 only delivered.
		sa := statusOf("demo-1", "wamid.1", state.Delivered, 1)
		sa.Recipient = "+15551110001"
		sb1 := statusOf("demo-2", "wamid.1", state.Delivered, 2)
		sb2 := statusOf("demo-2", "wamid.1", state.Read, 3)
		sb2.Recipient = "+15552220002"
		ra := inbound("in-a", "+15551110001", "wamid.1", 4)
		ra.Identity = "demo-1"
		rb := inbound("in-b", "+15552220002", "wamid.1", 5)
		rb.Identity = "demo-2"
		w.ingest([]store.StatusEvidence{sa, sb1, sb2}, []store.Inbound{ra, rb})
		res := w.apply()
		if len(res.Applied) != 3 || res.Parked != 0 {
			t.Fatalf("apply: %s %+v", outcomes(res.Applied), res)
		}
		for _, ae := range res.Applied {
			if ae.Outcome != store.EvidenceApplied {
				t.Errorf("%+v", ae)
			}
		}
		if got := w.get(a.ID); got.State != state.Delivered {
			t.Errorf("demo-1's row is %s, want delivered (demo-2's read must not reach it)", got.State)
		}
		if got := w.get(b.ID); got.State != state.Read {
			t.Errorf("demo-2's row is %s, want read", got.State)
		}
		for _, c := range []struct{ row, ident string }{{a.ID, "demo-1"}, {b.ID, "demo-2"}} {
			evs := must[[]store.StatusEvidence](t)(w.s.EvidenceList(whCtx, c.row, 0))
			for _, e := range evs {
				if e.Identity != c.ident {
					t.Errorf("row %s (%s) carries a status of %s", c.row, c.ident, e.Identity)
				}
			}
		}
		box := must[[]store.Inbound](t)(w.s.InboxList(whCtx, &store.InboxParams{}))
		if len(box) != 2 {
			t.Fatalf("inbox %+v", box)
		}
		for _, in := range box {
			want := map[string]string{"demo-1": a.ID, "demo-2": b.ID}[in.Identity]
			if in.MessageID == nil || *in.MessageID != want {
				t.Errorf("reply %s of %s linked to %v, want %s", in.ProviderMessageID, in.Identity, in.MessageID, want)
			}
		}
		if col := must[[]store.Collision](t)(w.s.ProviderIDCollisions(whCtx, 0)); len(col) != 0 {
			t.Errorf("one id under two identities is no collision: %+v", col)
		}
	})

	t.Run("a status whose reference names another row is set aside as suspect, never applied", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		a := w.sentAs("a", "demo-1", "+15551110001", "wamid.A")
		b := w.sentAs("b", "demo-1", "+15551110002", "wamid.B")
		st := statusOf("demo-1", "wamid.A", state.Failed, 1)
		st.CallbackRef = b.ID
		w.ingest([]store.StatusEvidence{st}, nil)
		res := w.apply()
		if outcomes(res.Applied) != "failed:->:suspect" || res.Parked != 0 {
			t.Fatalf("apply: %s %+v", outcomes(res.Applied), res)
		}
		if w.get(a.ID).State != state.Sent || w.get(b.ID).State != state.Sent {
			t.Errorf("a suspect status moved a row: %s %s", w.get(a.ID).State, w.get(b.ID).State)
		}
		sus := must[[]store.StatusEvidence](t)(w.s.EvidenceSuspects(whCtx, 0))
		if len(sus) != 1 || sus[0].Outcome != store.EvidenceSuspect || !strings.Contains(sus[0].Suspect, a.ID) ||
			!strings.Contains(sus[0].Suspect, b.ID) {
			t.Errorf("suspects %+v", sus)
		}
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 0 {
			t.Errorf("a suspect is decided once: %+v", res)
		}
		ws := must[*store.WebhookStats](t)(w.s.WebhookStats(whCtx))
		if ws.SuspectEvidence != 1 || ws.ParkedEvidence != 0 {
			t.Errorf("stats %+v", ws)
		}
	})

	t.Run("a status naming another recipient, or a reference to another identity's row, is set aside", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		a := w.sentAs("a", "demo-1", "+15551110001", "wamid.A")
		other := statusOf("demo-1", "wamid.A", state.Read, 1)
		other.Recipient = "+15559990009"
		// demo-2 has no wamid.X; its reference names demo-1's row.
		cross := statusOf("demo-2", "wamid.X", state.Delivered, 2)
		cross.CallbackRef = a.ID
		w.ingest([]store.StatusEvidence{other, cross}, nil)
		res := w.apply()
		if outcomes(res.Applied) != "read:->:suspect delivered:->:suspect" {
			t.Fatalf("apply: %s %+v", outcomes(res.Applied), res)
		}
		if got := w.get(a.ID); got.State != state.Sent || got.ProviderID != "wamid.A" {
			t.Errorf("row %+v", got)
		}
	})

	t.Run("a reference to a row of the identity without a provider id settles it and teaches it the id", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.claimed("k")
		if _, err := w.s.MessageTransition(whCtx, &store.TransitionParams{ID: m.ID, From: state.Sending, LeaseOwner: "drain-1",
			Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain}); err != nil {
			t.Fatal(err)
		}
		st := statusOf("sim", "wamid.R", state.Delivered, 1)
		st.CallbackRef, st.Recipient = m.ID, "+15551234567"
		w.ingest([]store.StatusEvidence{st}, nil)
		if res := w.apply(); outcomes(res.Applied) != "delivered:unknown->delivered:applied" {
			t.Fatalf("apply: %s", outcomes(res.Applied))
		}
		if got := w.get(m.ID); got.State != state.Delivered || got.ProviderID != "wamid.R" {
			t.Errorf("row %+v", got)
		}
	})

	t.Run("a provider id issued twice within one identity marks both rows; its evidence is set aside", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		a := w.sentAs("a", "demo-1", "+15551110001", "wamid.1")
		// A restarted simulator numbers from 1 again: the accepted send is
		// recorded (never refused by the index), as a collision.
		b := w.sentAs("b", "demo-1", "+15551110002", "wamid.1")
		if b.State != state.Sent || b.ProviderID != "wamid.1" {
			t.Fatalf("second row %+v", b)
		}
		col := must[[]store.Collision](t)(w.s.ProviderIDCollisions(whCtx, 0))
		if len(col) != 2 || col[0].MessageID != min(a.ID, b.ID) || col[1].MessageID != max(a.ID, b.ID) ||
			col[0].ProviderID != "wamid.1" || col[0].Identity != "demo-1" {
			t.Fatalf("collisions %+v", col)
		}
		w.ingest([]store.StatusEvidence{statusOf("demo-1", "wamid.1", state.Read, 1)},
			[]store.Inbound{{Provider: store.WebhookWhatsApp, Identity: "demo-1", ProviderMessageID: "in-1", From: "+15551110001",
				Type: "text", Text: "which one?", ContextID: "wamid.1", ReceivedAt: at(2)}})
		res := w.apply()
		if outcomes(res.Applied) != "read:->:suspect" {
			t.Fatalf("apply: %s", outcomes(res.Applied))
		}
		if w.get(a.ID).State != state.Sent || w.get(b.ID).State != state.Sent {
			t.Error("a status of a colliding id moved a row")
		}
		// The reply names its sender, which only one of the two was sent
		// to: that tells them apart.
		box := must[[]store.Inbound](t)(w.s.InboxList(whCtx, &store.InboxParams{}))
		if len(box) != 1 || box[0].MessageID == nil || *box[0].MessageID != a.ID {
			t.Errorf("the reply from a's recipient must be linked to a: %+v", box)
		}
		ws := must[*store.WebhookStats](t)(w.s.WebhookStats(whCtx))
		if ws.ProviderIDCollisions != 2 || ws.SuspectEvidence != 1 {
			t.Errorf("stats %+v", ws)
		}
	})

	t.Run("a status set aside before ingest is kept as suspect", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		m := w.sentAs("a", "demo-1", "+15551110001", "wamid.A")
		st := statusOf("demo-1", "wamid.A", state.Read, 1)
		st.Suspect = "phone_number_id 999 is no configured identity's"
		w.ingest([]store.StatusEvidence{st}, nil)
		if res := w.apply(); len(res.Applied) != 0 || res.Parked != 0 {
			t.Errorf("apply %+v", res)
		}
		sus := must[[]store.StatusEvidence](t)(w.s.EvidenceSuspects(whCtx, 0))
		if len(sus) != 1 || sus[0].Suspect != st.Suspect {
			t.Errorf("suspects %+v", sus)
		}
		if w.get(m.ID).State != state.Sent {
			t.Error("moved")
		}
	})
}
