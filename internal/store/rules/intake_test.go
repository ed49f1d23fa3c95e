package rules

import (
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func TestIntakeAdmitsRefusesAndExpires(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	p := store.EnqueueParams{Tenant: "default", Key: "k", Channel: "sms", Identity: "texts", To: "+15551234567",
		Payload: store.Payload{Text: "hi"}}
	w := Intake(store.IntakeDecision{ID: "01A", Params: &p}, now)
	if w.To != state.Queued || w.Event != "admit" || w.Msg == nil || w.Msg.ID != "01A" || w.Msg.BodyHash != p.BodyHash() ||
		w.Msg.Lane != store.LaneBulk || !w.Msg.NextAttemptAt.Equal(now) {
		t.Errorf("admitted: %+v %+v", w, w.Msg)
	}
	late := p
	late.ExpiresAt = now.Add(-time.Second)
	if w := Intake(store.IntakeDecision{ID: "01B", Params: &late}, now); w.To != state.Failed || w.Reason != state.Expired || w.Msg != nil || w.Event != "fail(expired)" {
		t.Errorf("past its deadline: %+v", w)
	}
	if w := Intake(store.IntakeDecision{ID: "01D", Expired: true}, now); w.To != state.Failed || w.Reason != state.Expired || w.Msg != nil {
		t.Errorf("decided expired: %+v", w)
	}
	// Parameters the store refuses are never queued, whatever the
	// admission said: a row without an address fails as invalid.
	empty := store.EnqueueParams{Tenant: "default", Key: "k", Identity: "texts"}
	if w := Intake(store.IntakeDecision{ID: "01E", Params: &empty}, now); w.To != state.Failed || w.Reason != state.Invalid || w.Msg != nil || w.Detail == "" {
		t.Errorf("unchecked parameters: %+v", w)
	}
	if w := Intake(store.IntakeDecision{ID: "01C", Invalid: `to: invalid phone number "+1555"`}, now); w.To != state.Failed ||
		w.Reason != state.Invalid || w.Detail != `to: invalid phone number "+1555"` || w.Event != "fail(invalid)" {
		t.Errorf("refused: %+v", w)
	}
}
