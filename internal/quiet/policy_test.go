package quiet

import (
	"errors"
	"testing"
	"time"
)

func TestPolicyHoldsByRowExemptsAndOverrides(t *testing.T) {
	w, _ := Parse("21:00-08:00")
	berlin := mustLoad(t, "Europe/Berlin")
	p := Policy{Window: &w, Zone: berlin, ExemptLanes: []string{"reply"}, ExemptPurposes: []string{"otp"}}
	// 22:00 in Berlin (CET, UTC+1) on 2026-12-02.
	at := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	morning := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC) // 08:00 CET
	de := Row{To: "+4930123456", Channel: "sms", Lane: "bulk"}
	h, ok := p.At(at, de)
	if !ok || !h.Until.Equal(morning) || h.Zone.String() != "Europe/Berlin" {
		t.Fatalf("German number at 22:00 Berlin: %+v, %v; want held until %s", h, ok, morning)
	}
	// A Japanese number is read in its own zone: 06:00 in Tokyo, quiet
	// until 08:00 there (23:00 UTC).
	if h, ok := p.At(at, Row{To: "+81312345678", Channel: "whatsapp", Lane: "bulk"}); !ok || !h.Until.Equal(time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)) {
		t.Errorf("Tokyo number: %+v, %v", h, ok)
	}
	// Email and numbers spanning zones use the identity's zone.
	for _, r := range []Row{{To: "ada@example.com", Channel: "email"}, {To: "+18002752273", Channel: "sms"}} {
		if h, ok := p.At(at, r); !ok || h.Zone != berlin {
			t.Errorf("%s: %+v, %v; want held in the identity's zone", r.To, h, ok)
		}
	}
	// Exempt lanes and purposes go at once; off goes at once.
	for _, r := range []Row{{To: de.To, Channel: "sms", Lane: "reply"}, {To: de.To, Channel: "sms", Lane: "bulk", Purpose: "otp"},
		{To: de.To, Channel: "sms", Lane: "bulk", Override: Off}} {
		if h, ok := p.At(at, r); ok {
			t.Errorf("%+v held: %+v", r, h)
		}
	}
	// An override window replaces the identity's, exemptions or not.
	r := Row{To: de.To, Channel: "sms", Lane: "reply", Override: "22:30-06:00"}
	if _, ok := p.At(at, r); ok {
		t.Errorf("22:00 is outside the override 22:30-06:00")
	}
	if h, ok := p.At(at.Add(time.Hour), r); !ok || !h.Until.Equal(time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)) {
		t.Errorf("23:00 under override 22:30-06:00: %+v, %v", h, ok)
	}
	// Outside the window nothing is held.
	if _, ok := p.At(morning, de); ok {
		t.Errorf("08:00 is held")
	}
	// No identity window: nothing held, unless the row asks for one.
	none := Policy{}
	if _, ok := none.At(at, de); ok {
		t.Errorf("no window, held")
	}
	if _, ok := none.At(at, Row{To: de.To, Channel: "sms", Override: "21:00-08:00"}); !ok {
		t.Errorf("an override window on an identity without quiet hours holds nothing")
	}
	// An override with no zone to read it in is refused by Check, and
	// holds nothing.
	email := Row{To: "ada@example.com", Channel: "email", Override: "21:00-08:00"}
	if err := none.Check(email); !errors.Is(err, ErrNoZone) {
		t.Errorf("Check(email override, no zone) = %v", err)
	}
	if _, ok := none.At(at, email); ok {
		t.Errorf("held on a guessed zone")
	}
	if err := CheckOverride("9-5"); err == nil {
		t.Errorf("CheckOverride(9-5) = nil")
	}
	for _, s := range []string{"", Off, "21:00-08:00"} {
		if err := CheckOverride(s); err != nil {
			t.Errorf("CheckOverride(%q) = %v", s, err)
		}
	}
}
