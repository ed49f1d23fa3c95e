package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/store"
)

// testOptOuts: opt-outs are recorded per identity and recipient, ordered
// by the evidence's own time, idempotent, and listed newest first.
func testOptOuts(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.New(t, nil)
	const who = "+15551234567"
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	set := func(identity string, out bool, at time.Time, source string) bool {
		t.Helper()
		changed, err := s.SetOptOut(ctx, store.OptOutParams{Identity: identity, Recipient: who, OptedOut: out, Source: source, At: at})
		if err != nil {
			t.Fatalf("SetOptOut(%s, %v, %s): %v", identity, out, at, err)
		}
		return changed
	}
	is := func(identity string) bool {
		t.Helper()
		out, err := s.OptedOut(ctx, identity, who)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if is("sms-us") {
		t.Fatal("a recipient nobody recorded is opted out")
	}
	if set("sms-us", false, base, "inbound START") {
		t.Fatal("an opt-in for a recipient never opted out reported a change")
	}
	if !set("sms-us", true, base.Add(time.Minute), "inbound STOP") || !is("sms-us") {
		t.Fatal("STOP did not opt the recipient out")
	}
	if is("sms-eu") {
		t.Fatal("an opt-out of one identity counted for another")
	}
	if set("sms-us", true, base.Add(time.Minute), "inbound STOP") {
		t.Fatal("the same STOP recorded twice reported a change")
	}
	// A newer STOP, then an older START arriving late: the START is older
	// than what is recorded and is ignored.
	set("sms-us", true, base.Add(5*time.Minute), "inbound STOP")
	if set("sms-us", false, base.Add(3*time.Minute), "inbound START") || !is("sms-us") {
		t.Fatal("an older START undid a newer STOP")
	}
	if !set("sms-us", false, base.Add(6*time.Minute), "inbound UNSTOP") || is("sms-us") {
		t.Fatal("a newer UNSTOP did not lift the opt-out")
	}
	set("sms-eu", true, base.Add(7*time.Minute), "twilio 21610")
	var ie *store.InvalidError
	if _, err := s.SetOptOut(ctx, store.OptOutParams{Identity: "sms-us", Recipient: who, OptedOut: true}); !errors.As(err, &ie) {
		t.Fatalf("an opt-out with no source: %v, want *InvalidError", err)
	}
	// Zero At means now (the store's clock).
	if !set("sms-us", true, time.Time{}, "operator") || !is("sms-us") {
		t.Fatal("an opt-out at now was not recorded")
	}
	list, err := s.ListOptOuts(ctx, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Identity != "sms-us" || list[0].Source != "operator" || list[1].Identity != "sms-eu" ||
		list[1].Source != "twilio 21610" || !list[1].ChangedAt.Equal(base.Add(7*time.Minute)) || !list[1].OptedOut {
		t.Fatalf("ListOptOuts = %+v", list)
	}
	if list, err := s.ListOptOuts(ctx, "sms-eu", 10); err != nil || len(list) != 1 || list[0].Recipient != who {
		t.Fatalf("ListOptOuts(sms-eu) = %+v, %v", list, err)
	}
}
