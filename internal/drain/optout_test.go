package drain_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// TestAnOptedOutRecipientIsRefusedBeforeAnyCall: of three rows, the one
// whose recipient opted out of the identity fails as opted_out with no
// call made (no attempt counted, nothing reached the simulator); the
// others go out. A failing opt-out read sends nothing either: the row
// goes back to the queue.
func TestAnOptedOutRecipientIsRefusedBeforeAnyCall(t *testing.T) {
	t.Parallel()
	s := setup(t, 3, nil)
	ctx := context.Background()
	optedOut := "+15550000001" // k-0001's recipient
	if _, err := s.SetOptOut(ctx, store.OptOutParams{Identity: "sim", Recipient: optedOut, OptedOut: true, Source: "inbound STOP"}); err != nil {
		t.Fatal(err)
	}
	sm := sim.New(sim.DefaultConfig())
	defer sm.Close()
	cfg := config(s, sm.Provider())
	cfg.OptedOut = s.OptedOut
	sum := drainAll(t, s, cfg)
	if sum.Sent != 2 || sum.Failed != 1 {
		t.Errorf("summary %+v, want 2 sent and the opted-out row failed", sum)
	}
	m, err := s.MessageGet(ctx, "", "k-0001")
	if err != nil {
		t.Fatal(err)
	}
	if m.State != state.Failed || m.Reason != state.OptedOut || m.Attempts != 0 || m.MaybeSent || m.LastError != drain.OptedOutError {
		t.Errorf("opted-out row: state %s reason %s attempts %d maybe_sent %v last_error %q", m.State, m.Reason, m.Attempts, m.MaybeSent, m.LastError)
	}
	if atts, _ := s.MessageAttempts(ctx, m.ID); len(atts) != 0 {
		t.Errorf("opted-out row has attempts %+v, want none", atts)
	}
	for _, d := range sm.Deliveries() {
		if d.To == optedOut {
			t.Errorf("the opted-out recipient got a message: %+v", d)
		}
	}
	if n := sm.DeliveryCount(); n != 2 {
		t.Errorf("%d deliveries, want 2", n)
	}

	// An opt-out store that cannot answer: nothing is sent, the row waits.
	s2 := setup(t, 1, nil)
	var asked atomic.Int32
	cfg2 := config(s2, sm.Provider())
	cfg2.OptedOut = func(context.Context, string, string) (bool, error) {
		asked.Add(1)
		return false, errors.New("database is locked")
	}
	before := sm.DeliveryCount()
	if _, err := drain.Run(ctx, cfg2); err != nil {
		t.Fatal(err)
	}
	m2, _ := s2.MessageGet(ctx, "", "k-0000")
	if asked.Load() == 0 || m2.State != state.Queued || m2.Attempts != 0 || !strings.Contains(m2.LastError, "opt-out check") || sm.DeliveryCount() != before {
		t.Errorf("with the opt-out read failing: asked %d, row %s attempts %d last_error %q, deliveries %d -> %d",
			asked.Load(), m2.State, m2.Attempts, m2.LastError, before, sm.DeliveryCount())
	}
}

// TestAnOptedOutAnswerFailsTheRowAndRecordsTheOptOut: a provider's answer
// that says the recipient opted out (provider.Result.OptedOut, Twilio's
// 21610) fails the row as opted_out, with its attempt and the provider's
// code kept, and records the opt-out: the next row to that recipient is
// refused before any call.
func TestAnOptedOutAnswerFailsTheRowAndRecordsTheOptOut(t *testing.T) {
	t.Parallel()
	s := setup(t, 1, nil)
	ctx := context.Background()
	p := &scripted{results: []provider.Result{{Class: retry.Permanent, HTTPStatus: 400, Code: "21610", OptedOut: true,
		RawError: `{"code":21610,"message":"Attempt to send to unsubscribed recipient"}`}}}
	cfg := config(s, p)
	cfg.OptedOut = s.OptedOut
	if sum := drainAll(t, s, cfg); sum.Failed != 1 {
		t.Errorf("summary %+v, want the row failed", sum)
	}
	m, err := s.MessageGet(ctx, "", "k-0000")
	if err != nil {
		t.Fatal(err)
	}
	if m.State != state.Failed || m.Reason != state.OptedOut || m.Attempts != 1 || !strings.Contains(m.LastError, "21610") {
		t.Errorf("row: %s(%s) attempts %d last_error %q; want failed(opted_out) after 1 attempt with the answer", m.State, m.Reason, m.Attempts, m.LastError)
	}
	outs, err := s.ListOptOuts(ctx, "sim", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Recipient != m.To || !outs[0].OptedOut || outs[0].Source != "send answer, code 21610" {
		t.Fatalf("opt-outs %+v, want %s opted out by the send answer", outs, m.To)
	}
	if _, err := s.MessageEnqueue(ctx, &store.EnqueueParams{Key: "k-next", To: m.To, Channel: m.Channel, Identity: "sim",
		Payload: store.Payload{Text: "again"}}); err != nil {
		t.Fatal(err)
	}
	drainAll(t, s, cfg)
	if p.calls != 1 {
		t.Errorf("%d calls, want none for the next row to the opted-out recipient", p.calls)
	}
	if n, _ := s.MessageGet(ctx, "", "k-next"); n.State != state.Failed || n.Reason != state.OptedOut || n.Attempts != 0 {
		t.Errorf("next row: %s(%s) attempts %d, want refused before any call", n.State, n.Reason, n.Attempts)
	}
}
