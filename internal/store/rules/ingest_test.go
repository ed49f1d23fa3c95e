package rules

import (
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func TestIngestWritesEachEventOnce(t *testing.T) {
	now := t0.Add(time.Hour)
	recv := t0.Add(1500 * time.Nanosecond)
	events := map[string]*store.IngestedEvent{
		"e1": {Provider: "whatsapp", Identity: "main", ReceivedAt: recv},
		"e2": {Provider: "whatsapp", Identity: "main", ReceivedAt: recv, Processed: true},
		"e3": {Provider: "http", Identity: "alt", ReceivedAt: recv},
	}
	ps := []store.IngestParams{
		{EventID: "e1", Skipped: "item 2: no id",
			Statuses: []store.StatusEvidence{{ProviderID: "wamid.X", Status: state.Delivered}},
			Inbound:  []store.Inbound{{ProviderMessageID: "in1", From: "+1"}, {ProviderMessageID: "in2", ReceivedAt: t0.Add(-time.Minute)}}},
		{EventID: "e2", Statuses: []store.StatusEvidence{{ProviderID: "wamid.Y"}}}, // processed already
		{EventID: "e1"}, // earlier in the call
		{EventID: "e3", Err: "unreadable", Statuses: []store.StatusEvidence{{ProviderID: "wamid.Z"}}},
		{EventID: "gone", Statuses: []store.StatusEvidence{{ProviderID: "wamid.W"}}},
	}
	got := Ingest(ps, events, now)
	if len(got) != 3 || got[0].P != &ps[0] || got[1].P != &ps[3] || got[2].P != &ps[4] {
		t.Fatalf("%+v", got)
	}
	e1, e3, gone := got[0], got[1], got[2]
	if !e1.Write || e1.Mark != "item 2: no id" || e1.Ev == nil || !e1.Received.Equal(recv) {
		t.Fatalf("e1 %+v", e1)
	}
	st := ps[0].Statuses[0]
	if st.EventID != "e1" || st.Provider != "whatsapp" || st.Identity != "main" || !st.ReceivedAt.Equal(recv) {
		t.Fatalf("status %+v", st)
	}
	in1, in2 := ps[0].Inbound[0], ps[0].Inbound[1]
	if in1.EventID != "e1" || in1.Identity != "main" || !in1.ReceivedAt.Equal(t0.Add(time.Microsecond)) || !in2.ReceivedAt.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("inbound %+v %+v", in1, in2)
	}
	// Unreadable: marked with its error, nothing of it written or prepared.
	if e3.Write || e3.Mark != "unreadable" || ps[3].Statuses[0].EventID != "" {
		t.Fatalf("e3 %+v", e3)
	}
	// No stored event: written, at the ingest's time, nothing to mark.
	if !gone.Write || gone.Ev != nil || !gone.Received.Equal(now) || ps[4].Statuses[0].ReceivedAt != now {
		t.Fatalf("gone %+v", gone)
	}
	if ps[1].Statuses[0].EventID != "" {
		t.Fatal("a processed event was prepared")
	}
}

func TestWindowsOnePerSenderAtTheLatest(t *testing.T) {
	in := func(identity, from string, at time.Duration) *store.Inbound {
		return &store.Inbound{Identity: identity, From: from, ReceivedAt: t0.Add(at)}
	}
	got := Windows([]*store.Inbound{
		in("main", "+2", time.Second), in("main", "+1", 3*time.Second), in("main", "+2", 5*time.Second),
		in("main", "+2", 2*time.Second), in("main", "", 9*time.Second), in("", "+3", time.Second),
	})
	want := []Window{
		{Identity: "", Recipient: "+3", At: t0.Add(time.Second), Release: false},
		{Identity: "main", Recipient: "+1", At: t0.Add(3 * time.Second), Release: true},
		{Identity: "main", Recipient: "+2", At: t0.Add(5 * time.Second), Release: true},
	}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(Windows(nil)) != 0 {
		t.Fatal("windows of nothing")
	}
}
