package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// testEmail: an email row goes through the store as a phone row does,
// its address checked as an email address (internal/recipient), never
// as a number.
func testEmail(t *testing.T, h Harness) {
	ctx := context.Background()
	email := func(key, to string) store.EnqueueParams {
		p := Params(key)
		p.Channel, p.To, p.Identity = "email", to, "mail"
		p.Payload = store.Payload{Text: "Your order shipped"}
		return p
	}

	t.Run("an email row is enqueued, claimed and sent", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := email("mail-1", "Ada.Lovelace@example.com")
		res := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		if res.Replayed || res.Message.Channel != "email" || res.Message.To != "Ada.Lovelace@example.com" || res.Message.State != state.Queued {
			t.Fatalf("enqueued %+v", res.Message)
		}
		if again := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)); !again.Replayed || again.Message.ID != res.Message.ID {
			t.Errorf("the same email send again: %+v (replayed %v)", again.Message, again.Replayed)
		}
		other := p
		other.To = "grace@example.com"
		if _, err := s.MessageEnqueue(ctx, &other); !errors.Is(err, store.ErrConflict) {
			t.Errorf("the key to another address: err = %v, want a conflict", err)
		}
		clk.Advance(time.Second)
		cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10}))
		if len(cs) != 1 || cs[0].ID != res.Message.ID || cs[0].Channel != "email" || cs[0].To != p.To || cs[0].Payload.Text != p.Payload.Text {
			t.Fatalf("claimed %+v", cs)
		}
		now := clk.Now()
		m := must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: cs[0].ID, From: state.Sending,
			LeaseOwner: "drain-1", LeaseUntil: *cs[0].LeaseUntil, Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain,
			ProviderID: "<msg-1@mail.example.com>", Attempt: &store.Attempt{Number: 1, Class: "ok", StartedAt: now, FinishedAt: now}}))
		if m.State != state.Sent || m.ProviderID != "<msg-1@mail.example.com>" || m.Channel != "email" {
			t.Errorf("after accept: %+v", m)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID))
		if len(hist) != 3 || hist[2].To != state.Sent {
			t.Errorf("history %+v", hist)
		}
	})

	t.Run("an email address not in its normal form, or a number on email, is refused and writes nothing", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		for _, to := range []string{"Ada <ada@example.com>", "ada@EXAMPLE.com", "ada@localhost", "not an address", "+15551234567", ""} {
			p := email("bad", to)
			var inv *store.InvalidError
			if _, err := s.MessageEnqueue(ctx, &p); !errors.As(err, &inv) || inv.Field != "to" {
				t.Errorf("to %q on email: err = %v, want an invalid to", to, err)
			}
		}
		p := Params("phone-as-mail")
		p.To = "ada@example.com"
		var inv *store.InvalidError
		if _, err := s.MessageEnqueue(ctx, &p); !errors.As(err, &inv) || inv.Field != "to" {
			t.Errorf("an email address on whatsapp: err = %v, want an invalid to", err)
		}
		if _, err := s.MessageGet(ctx, "", "bad"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused send was written: %v", err)
		}
	})
}
