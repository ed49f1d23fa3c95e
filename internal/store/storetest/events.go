package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func addEndpoint(t *testing.T, s store.Store, id, tenant string) {
	t.Helper()
	e := &store.Endpoint{ID: id, Tenant: tenant, URL: "https://app.example/hooks/" + id, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	if err := s.EndpointAdd(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

func eventTypes(evs []store.Event) string {
	var b []string
	for _, e := range evs {
		b = append(b, e.Type)
	}
	return strings.Join(b, ",")
}

func testEvents(t *testing.T, h Harness) {
	ctx := context.Background()
	claimEv := func(t *testing.T, s store.Store, owner string) []store.EventDelivery {
		t.Helper()
		return must[[]store.EventDelivery](t)(s.EventClaim(ctx, &store.EventClaimParams{Owner: owner, LeaseFor: time.Minute, Limit: 10}))
	}
	deliver := func(t *testing.T, s store.Store, d store.EventDelivery) {
		t.Helper()
		if err := s.EventRecord(ctx, &store.EventOutcome{Seq: d.Seq, EndpointID: d.EndpointID, Owner: d.LeaseOwner, Delivered: true}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("no event is written for a tenant without an endpoint", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_other", "another-tenant")
		w.sent("k-1", "wamid.1")
		if evs := must[[]store.Event](t)(w.s.EventList(ctx, "", 0)); len(evs) != 0 {
			t.Errorf("events %+v, want none: the tenant has no endpoint", evs)
		}
	})

	t.Run("sent then delivered are two events to each endpoint, delivered in order one at a time", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		addEndpoint(t, w.s, "ep_b", "")
		m := w.sent("k-1", "wamid.1")
		w.ingest([]store.StatusEvidence{status("wamid.1", state.Delivered, 5)}, nil)
		w.apply()
		if got := w.get(m.ID); got.State != state.Delivered {
			t.Fatalf("row is %s, want delivered", got.State)
		}
		evs := must[[]store.Event](t)(w.s.EventList(ctx, "ep_a", 0))
		if eventTypes(evs) != "message.sent,message.delivered" {
			t.Fatalf("ep_a events %q, want sent then delivered", eventTypes(evs))
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(evs[1].Data), &data); err != nil {
			t.Fatalf("data %q: %v", evs[1].Data, err)
		}
		want := map[string]any{"message_id": m.ID, "key": "k-1", "tenant": store.DefaultTenant, "state": "delivered",
			"provider_id": "wamid.1", "channel": "whatsapp", "to": "+15551234567", "challenge_key": ""}
		for k, v := range want {
			if data[k] != v {
				t.Errorf("data[%s] = %v, want %v (data %s)", k, data[k], v, evs[1].Data)
			}
		}
		if !strings.HasPrefix(evs[0].ID, "evt_") || evs[0].ID == evs[1].ID || evs[0].MessageID != m.ID || evs[0].Subject != m.ID {
			t.Errorf("events %+v", evs)
		}
		if bs := must[[]store.Event](t)(w.s.EventList(ctx, "ep_b", 0)); eventTypes(bs) != "message.sent,message.delivered" || bs[0].ID == evs[0].ID {
			t.Errorf("ep_b events %+v, want their own copies", bs)
		}
		// Only the head of each endpoint's queue for the message is claimable.
		first := claimEv(t, w.s, "w1")
		if len(first) != 2 || first[0].Type != "message.sent" || first[1].Type != "message.sent" || first[0].Attempts != 1 ||
			first[0].URL == "" || !strings.HasPrefix(first[0].Secret, "whsec_") {
			t.Fatalf("first claim %+v, want each endpoint's sent event", first)
		}
		if more := claimEv(t, w.s, "w2"); len(more) != 0 {
			t.Fatalf("second claim %+v while the sent events are in flight: a message's later event must wait", more)
		}
		for _, d := range first {
			deliver(t, w.s, d)
		}
		next := claimEv(t, w.s, "w2")
		if len(next) != 2 || next[0].Type != "message.delivered" {
			t.Fatalf("claim after delivery %+v, want the delivered events", next)
		}
		for _, d := range next {
			deliver(t, w.s, d)
		}
		if rest := claimEv(t, w.s, "w3"); len(rest) != 0 {
			t.Errorf("claim after all delivered %+v", rest)
		}
		eps := must[[]store.EndpointStatus](t)(w.s.EndpointList(ctx, ""))
		if len(eps) != 2 || eps[0].Delivered != 2 || eps[0].Pending != 0 || eps[0].LastSuccessAt == nil || eps[0].ConsecutiveFailures != 0 {
			t.Errorf("endpoints %+v", eps)
		}
	})

	t.Run("a lease keeps an event from a second worker until it is over, then the same id is redelivered", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		w.sent("k-1", "wamid.1")
		d := claimEv(t, w.s, "w1")
		if len(d) != 1 {
			t.Fatalf("claimed %+v", d)
		}
		if again := claimEv(t, w.s, "w2"); len(again) != 0 {
			t.Fatalf("w2 claimed %+v under w1's lease", again)
		}
		w.clk.Advance(2 * time.Minute) // w1 vanished after its POST, before recording
		re := claimEv(t, w.s, "w2")
		if len(re) != 1 || re[0].ID != d[0].ID || re[0].Attempts != 2 {
			t.Fatalf("after the lease: %+v, want %s again with attempt 2", re, d[0].ID)
		}
		err := w.s.EventRecord(ctx, &store.EventOutcome{Seq: d[0].Seq, EndpointID: "ep_a", Owner: "w1", Error: "late", NextAt: w.clk.Now()})
		if !errors.Is(err, store.ErrStale) {
			t.Errorf("w1's late failure: %v, want ErrStale", err)
		}
		deliver(t, w.s, re[0])
	})

	t.Run("a failure backs off, a dead event stops blocking its message and retry revives it", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		w.sent("k-1", "wamid.1")
		w.ingest([]store.StatusEvidence{status("wamid.1", state.Delivered, 5)}, nil)
		w.apply()
		d := claimEv(t, w.s, "w1")[0]
		next := w.clk.Now().Add(time.Minute)
		if err := w.s.EventRecord(ctx, &store.EventOutcome{Seq: d.Seq, EndpointID: "ep_a", Owner: "w1", Error: "HTTP 500", NextAt: next}); err != nil {
			t.Fatal(err)
		}
		if got := claimEv(t, w.s, "w1"); len(got) != 0 {
			t.Fatalf("claimed %+v before the backoff is over", got)
		}
		w.clk.Advance(time.Minute)
		d = claimEv(t, w.s, "w1")[0]
		if d.Type != "message.sent" || d.Attempts != 2 || d.LastError != "HTTP 500" {
			t.Fatalf("retry claim %+v", d)
		}
		if err := w.s.EventRecord(ctx, &store.EventOutcome{Seq: d.Seq, EndpointID: "ep_a", Owner: "w1", Error: "HTTP 500", Dead: true, NextAt: w.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		eps := must[[]store.EndpointStatus](t)(w.s.EndpointList(ctx, ""))
		if len(eps) != 1 || eps[0].Dead != 1 || eps[0].Pending != 1 || eps[0].ConsecutiveFailures != 2 || eps[0].LastError != "HTTP 500" || eps[0].LastFailureAt == nil {
			t.Fatalf("endpoint %+v, want 1 dead, 1 pending, 2 failures", eps)
		}
		b := must[*store.EventBacklog](t)(w.s.EventBacklog(ctx))
		if b.Pending != 1 || b.Dead != 1 || b.OldestPendingAt == nil {
			t.Errorf("backlog %+v", b)
		}
		if got := claimEv(t, w.s, "w1"); len(got) != 1 || got[0].Type != "message.delivered" {
			t.Fatalf("claim after the dead one %+v, want the delivered event", got)
		} else {
			deliver(t, w.s, got[0])
		}
		if n := must[int](t)(w.s.EndpointRetry(ctx, "ep_a")); n != 1 {
			t.Fatalf("retry revived %d, want 1", n)
		}
		if got := claimEv(t, w.s, "w1"); len(got) != 1 || got[0].ID != d.ID || got[0].Attempts != 1 {
			t.Errorf("claim after retry %+v, want %s from attempt 1", got, d.ID)
		}
		if _, err := w.s.EndpointRetry(ctx, "ep_nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("retry of an unknown endpoint: %v", err)
		}
	})

	t.Run("concurrent claims never hand one event to two workers", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		const n = 40
		for i := range n {
			w.sent(fmt.Sprintf("k-%02d", i), fmt.Sprintf("wamid.%d", i))
		}
		other := w.s
		if h.Reopen != nil {
			other = h.Reopen(t, w.s)
		}
		got := make([][]store.EventDelivery, 4)
		errs := make([]error, 4)
		done := make(chan int)
		for i := range got {
			go func() {
				s := w.s
				if i%2 == 1 {
					s = other
				}
				// Now: the second handle's clock is the real one, not w's.
				got[i], errs[i] = s.EventClaim(ctx, &store.EventClaimParams{Owner: fmt.Sprintf("w%d", i), LeaseFor: time.Minute, Limit: n,
					Now: w.clk.Now()})
				done <- i
			}()
		}
		for range got {
			<-done
		}
		seen := map[string]string{}
		total := 0
		for i, ds := range got {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			for _, d := range ds {
				if prev, ok := seen[d.ID]; ok {
					t.Errorf("event %s claimed by %s and w%d", d.ID, prev, i)
				}
				seen[d.ID] = d.LeaseOwner
				total++
			}
		}
		if total != n {
			t.Errorf("%d claims of %d events, want each claimed once", total, n)
		}
	})

	t.Run("removing an endpoint drops its events and stops new ones", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		w.sent("k-1", "wamid.1")
		if err := w.s.EndpointRemove(ctx, "ep_a"); err != nil {
			t.Fatal(err)
		}
		w.sent("k-2", "wamid.2")
		if evs := must[[]store.Event](t)(w.s.EventList(ctx, "", 0)); len(evs) != 0 {
			t.Errorf("events %+v after remove", evs)
		}
		if err := w.s.EndpointRemove(ctx, "ep_a"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second remove: %v, want ErrNotFound", err)
		}
	})

	t.Run("purge drops finished events written before its bound and keeps pending ones", func(t *testing.T) {
		t.Parallel()
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		w.sent("k-1", "wamid.1")
		w.sent("k-2", "wamid.2")
		ds := claimEv(t, w.s, "w1")
		if len(ds) != 2 {
			t.Fatalf("claimed %+v", ds)
		}
		deliver(t, w.s, ds[0])
		if err := w.s.EventRecord(ctx, &store.EventOutcome{Seq: ds[1].Seq, EndpointID: "ep_a", Owner: "w1", Error: "HTTP 500", Dead: true, NextAt: w.clk.Now()}); err != nil {
			t.Fatal(err)
		}
		w.clk.Advance(time.Hour)
		w.sent("k-3", "wamid.3") // pending, and newer than the bound
		before := w.clk.Now().Add(-time.Minute)
		if n := must[int](t)(w.s.EventPurge(ctx, &store.PurgeParams{Before: before, DryRun: true})); n != 2 {
			t.Errorf("dry run would purge %d, want 2", n)
		}
		if n := must[int](t)(w.s.EventPurge(ctx, &store.PurgeParams{Before: before, Tenant: "another-tenant"})); n != 0 {
			t.Errorf("another tenant's purge took %d", n)
		}
		if n := must[int](t)(w.s.EventPurge(ctx, &store.PurgeParams{Before: w.clk.Now().Add(time.Minute)})); n != 2 {
			t.Errorf("purged %d, want the delivered and the dead event", n)
		}
		if evs := must[[]store.Event](t)(w.s.EventList(ctx, "", 0)); len(evs) != 1 || evs[0].DeliveredAt != nil {
			t.Errorf("left %+v, want the pending event only", evs)
		}
	})

	t.Run("a bad endpoint is refused", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		for _, e := range []store.Endpoint{{ID: "ep_1", URL: "ftp://x", Secret: "whsec_x"}, {ID: "ep_1", URL: "https://x", Secret: "nope"}} {
			if err := s.EndpointAdd(ctx, &e); !isInvalid(err) {
				t.Errorf("EndpointAdd(%+v) = %v, want *InvalidError", e, err)
			}
		}
	})

	t.Run("a completed challenge is an event of its own", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		addEndpoint(t, s, "ep_a", "")
		p := challengeParams("ch-1")
		must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p))
		must[int](t)(s.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain}))
		c1 := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "d", LeaseFor: time.Minute, Limit: 10}))[0]
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c1.ID, From: state.Sending,
			Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain, LeaseOwner: c1.LeaseOwner}))
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c1.ID, From: state.Sent,
			Event: state.Event{Kind: state.Evidence, Status: state.Delivered}, Source: store.SourceWebhook}))
		must[int](t)(s.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain}))
		evs := must[[]store.Event](t)(s.EventList(ctx, "", 0))
		var got []string
		for _, e := range evs {
			got = append(got, e.Type+"@"+map[bool]string{true: "step1", false: "other"}[e.MessageID == c1.ID])
		}
		want := "message.sent@step1,message.delivered@step1,message.failed@other,challenge.completed@step1"
		if strings.Join(got, ",") != want {
			t.Fatalf("events %v, want %s", got, want)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(evs[3].Data), &data); err != nil {
			t.Fatal(err)
		}
		if data["challenge_key"] != "ch-1" || data["outcome"] != "completed" || data["message_id"] != c1.ID || evs[3].ChallengeID == "" {
			t.Errorf("challenge event %+v data %v", evs[3], data)
		}
		if !strings.Contains(evs[0].Data, `"challenge_key":"ch-1"`) && !strings.Contains(evs[0].Data, `"challenge_key" : "ch-1"`) {
			t.Errorf("step event data %s, want the challenge's key", evs[0].Data)
		}
	})

	t.Run("an event is written if and only if its change commits", func(t *testing.T) {
		t.Parallel()
		if h.RawTx == nil {
			t.Fatal("the harness has no RawTx: every store must run this test")
		}
		w := newWH(t, h)
		addEndpoint(t, w.s, "ep_a", "")
		m := w.claimed("k-1")
		// What any writer of a change does: the row, then its history row,
		// in one transaction.
		stmts := []string{
			fmt.Sprintf("UPDATE messages SET state = 'sent', provider_id = 'wamid.1', lease_owner = '', lease_until = NULL WHERE id = '%s'", m.ID),
			fmt.Sprintf("INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at) "+
				"SELECT message_id, seq + 1, 'sending', 'sent', '', 'accept', TRUE, 'drain', '', at FROM history "+
				"WHERE message_id = '%s' AND seq = (SELECT max(seq) FROM history WHERE message_id = '%s')", m.ID, m.ID),
		}
		h.RawTx(t, w.s, false, stmts...)
		if evs := must[[]store.Event](t)(w.s.EventList(ctx, "", 0)); len(evs) != 0 || w.get(m.ID).State != state.Sending {
			t.Fatalf("after a rollback: events %+v, want none", evs)
		}
		h.RawTx(t, w.s, true, stmts...)
		if evs := must[[]store.Event](t)(w.s.EventList(ctx, "", 0)); eventTypes(evs) != "message.sent" {
			t.Fatalf("after the commit: events %q, want message.sent", eventTypes(evs))
		}
	})
}
