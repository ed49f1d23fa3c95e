package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// testOps covers what operators read and do: stuck rows, takeovers of
// expired leases, vital signs and purging.
func testOps(t *testing.T, h Harness) {
	ctx := context.Background()
	enqueue := func(t *testing.T, s store.Store, key string, change func(*store.EnqueueParams)) *store.Message {
		t.Helper()
		p := Params(key)
		if change != nil {
			change(&p)
		}
		return must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
	}
	claimOne := func(t *testing.T, s store.Store, lease time.Duration) store.Claimed {
		t.Helper()
		cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: lease, Limit: 1}))
		if len(cs) != 1 {
			t.Fatalf("claimed %d rows, want 1", len(cs))
		}
		return cs[0]
	}
	move := func(t *testing.T, s store.Store, id string, from state.State, ev state.Event, attempt *store.Attempt) {
		t.Helper()
		p := &store.TransitionParams{ID: id, From: from, Event: ev, Source: store.SourceDrain, Attempt: attempt}
		if from == state.Sending && ev.Kind != state.LeaseExpired && ev.Kind != state.LeaseRequeue && ev.Kind != state.Resolve {
			p.LeaseOwner = "drain-1"
		}
		must[*store.Message](t)(s.MessageTransition(ctx, p))
	}
	keysOf := func(ms []store.StuckMessage) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Key)
		}
		return fmt.Sprint(out)
	}

	t.Run("stuck lists expired leases, old claims and old unknowns, oldest first", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		for _, k := range []string{"a-unknown-old", "b-expired", "c-claimed-old", "d-unknown-new", "e-live", "f-queued"} {
			enqueue(t, s, k, func(p *store.EnqueueParams) {
				if k == "c-claimed-old" {
					p.Purpose = "otp"
				}
			})
		}
		// t0: a is claimed and its answer lost (unknown since t0).
		a := claimOne(t, s, time.Hour)
		move(t, s, a.ID, state.Sending, state.Event{Kind: state.Ambiguous},
			&store.Attempt{Number: 1, StartedAt: clk.Now(), FinishedAt: clk.Now(), Class: "ambiguous", ProviderCode: "131000"})
		clk.Advance(time.Second)
		b := claimOne(t, s, 5*time.Second) // lease ends at t0+6s
		clk.Advance(time.Second)
		claimOne(t, s, time.Hour) // c: claimed at t0+2s, lease live for an hour
		clk.Advance(3 * time.Minute)
		d := claimOne(t, s, time.Hour)
		move(t, s, d.ID, state.Sending, state.Event{Kind: state.Ambiguous}, nil)
		claimOne(t, s, time.Hour) // e: claimed just now
		clk.Advance(10 * time.Second)

		got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute}))
		if keysOf(got) != "[a-unknown-old b-expired c-claimed-old]" {
			t.Fatalf("stuck --older-than 1m: %s", keysOf(got))
		}
		if got[0].LastCode != "131000" || got[1].LastCode != "" || got[0].State != state.Unknown || got[1].State != state.Sending {
			t.Errorf("rows: %+v", got[:2])
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{})); keysOf(got) != "[a-unknown-old b-expired c-claimed-old d-unknown-new e-live]" {
			t.Errorf("stuck with no age: %s", keysOf(got))
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Hour})); keysOf(got) != "[b-expired]" {
			t.Errorf("an expired lease is stuck at any age; got %s", keysOf(got))
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{LeaseExpired: true})); keysOf(got) != "[b-expired]" {
			t.Errorf("lease expired: %s", keysOf(got))
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute, State: state.Unknown})); keysOf(got) != "[a-unknown-old]" {
			t.Errorf("--state unknown: %s", keysOf(got))
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{OlderThan: time.Minute, Purpose: "otp"})); keysOf(got) != "[c-claimed-old]" {
			t.Errorf("--purpose otp: %s", keysOf(got))
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{Identity: "other"})); len(got) != 0 {
			t.Errorf("--identity other: %s", keysOf(got))
		}
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{Limit: 2})); keysOf(got) != "[a-unknown-old b-expired]" {
			t.Errorf("--limit 2: %s", keysOf(got))
		}
		_, err := s.MessageStuck(ctx, &store.StuckParams{State: state.Queued})
		if !isInvalid(err) {
			t.Errorf("--state queued: %v, want an invalid-parameter error", err)
		}
		_ = b
	})

	t.Run("a takeover or a verdict waits for the lease to expire and the takeover margin to pass", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		enqueue(t, s, "k1", nil)
		enqueue(t, s, "k2", nil)
		c1 := claimOne(t, s, 10*time.Second)
		c2 := claimOne(t, s, 10*time.Second)
		refused := func(when string) {
			t.Helper()
			for _, ev := range []state.Event{{Kind: state.LeaseExpired}, {Kind: state.LeaseRequeue}, {Kind: state.Resolve, Status: state.Sent}} {
				_, err := s.MessageTransition(ctx, &store.TransitionParams{ID: c1.ID, From: state.Sending, Event: ev, Source: store.SourceReconcile})
				if !errors.Is(err, store.ErrLeaseLive) {
					t.Errorf("%s %s: %v, want ErrLeaseLive", ev, when, err)
				}
			}
			if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{LeaseExpired: true})); len(got) != 0 {
				t.Errorf("stuck lists expired leases %s: %s", when, keysOf(got))
			}
		}
		refused("under a live lease")
		// The lease has ended, but a drain that checked it just before
		// the end may still be calling: the row is still its own.
		clk.Advance(10 * time.Second)
		refused("at the lease's end")
		clk.Advance(store.TakeoverMargin - store.Resolution)
		refused("a moment before the takeover margin has passed")
		clk.Advance(store.Resolution)
		if got := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{LeaseExpired: true})); len(got) != 2 {
			t.Errorf("stuck lists %s once the margin has passed, want both", keysOf(got))
		}
		res := must[[]store.TransitionResult](t)(s.MessageTransitionMany(ctx, []store.TransitionParams{
			{ID: c1.ID, From: state.Sending, Event: state.Event{Kind: state.LeaseExpired}, Source: store.SourceReconcile, Detail: "lease expired"},
			{ID: c2.ID, From: state.Sending, Event: state.Event{Kind: state.LeaseRequeue}, Source: store.SourceReconcile},
		}))
		if res[0].Err != nil || res[0].State != state.Unknown || res[1].Err != nil || res[1].State != state.Queued {
			t.Fatalf("after the leases expired: %+v", res)
		}
		m := must[*store.Message](t)(s.MessageGet(ctx, "", c2.ID))
		if m.State != state.Queued || m.LeaseOwner != "" || m.Attempts != 1 {
			t.Errorf("requeued row: %+v", m)
		}
	})

	t.Run("stats are the queue's figures", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		// Two identities; "other" is paused.
		for i := range 3 {
			enqueue(t, s, fmt.Sprintf("other-%d", i), func(p *store.EnqueueParams) { p.Identity = "other" })
		}
		if err := s.IdentityPause(ctx, "other", "token expired"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		for i := range 6 {
			enqueue(t, s, fmt.Sprintf("sim-%d", i), nil)
		}
		// Two replays of one key count twice.
		enqueue(t, s, "sim-0", nil)
		enqueue(t, s, "sim-0", nil)
		enqueue(t, s, "later", func(p *store.EnqueueParams) { p.NotBefore = t0.Add(time.Hour) })
		clk.Advance(time.Second) // t0+2s
		now := func() time.Time { return clk.Now() }
		// sim-0: sent at t0+2s, delivered at t0+5s.
		c := claimOne(t, s, time.Minute)
		move(t, s, c.ID, state.Sending, state.Event{Kind: state.Accept},
			&store.Attempt{Number: 1, StartedAt: now(), FinishedAt: now(), Class: "accepted", HTTPStatus: 200})
		// sim-1: unknown.
		c = claimOne(t, s, time.Minute)
		move(t, s, c.ID, state.Sending, state.Event{Kind: state.Ambiguous},
			&store.Attempt{Number: 1, StartedAt: now(), FinishedAt: now(), Class: "ambiguous"})
		// sim-2: retried.
		c = claimOne(t, s, time.Minute)
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: "drain-1",
			Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, NextAttemptAt: now().Add(time.Minute),
			Attempt: &store.Attempt{Number: 1, StartedAt: now(), FinishedAt: now(), Class: "transient", HTTPStatus: 503}}))
		// sim-3: claimed with a lease that will have expired.
		claimOne(t, s, 2*time.Second)
		clk.Advance(3 * time.Second) // t0+5s
		first := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{KeyPrefix: "sim-0"}))[0]
		move(t, s, first.ID, state.Sent, state.Event{Kind: state.Evidence, Status: state.Delivered}, nil)

		st := must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{}))
		counts := map[string]int{}
		for _, c := range st.Counts {
			counts[c.Identity+"/"+string(c.State)] = c.N
		}
		want := map[string]int{"other/queued": 3, "sim/delivered": 1, "sim/unknown": 1, "sim/queued": 4, "sim/sending": 1}
		if fmt.Sprint(counts) != fmt.Sprint(want) {
			t.Errorf("counts %v, want %v", counts, want)
		}
		// The oldest eligible row: other's are older but paused, sim-2
		// waits for its retry and "later" for its not_before, so sim-4
		// (due since t0+1s).
		if st.OldestEligible == nil || !st.OldestEligible.Equal(t0.Add(time.Second).Truncate(store.Resolution)) {
			t.Errorf("oldest eligible due at %v, want %v", st.OldestEligible, t0.Add(time.Second))
		}
		if st.SendingPastLease != 1 || st.Unknown != 1 || st.KeyReplays != 2 {
			t.Errorf("sending past lease %d (want 1), unknown %d (want 1), key replays %d (want 2)", st.SendingPastLease, st.Unknown, st.KeyReplays)
		}
		if fmt.Sprint(st.AttemptsByClass) != "map[accepted:1 ambiguous:1 transient:1]" {
			t.Errorf("attempts by class %v", st.AttemptsByClass)
		}
		if st.Delivered != 1 || st.DeliveryP50 != 3*time.Second || st.DeliveryP95 != 3*time.Second {
			t.Errorf("delivered %d, p50 %s, p95 %s; want 1, 3s, 3s", st.Delivered, st.DeliveryP50, st.DeliveryP95)
		}
		clk.Advance(2 * time.Hour)
		st = must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{}))
		if len(st.AttemptsByClass) != 0 || st.Delivered != 0 {
			t.Errorf("two hours later the last hour's figures are %v and %d deliveries", st.AttemptsByClass, st.Delivered)
		}
	})

	t.Run("purge drops old finished payloads and keeps their keys", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		for _, k := range []string{"old-sent", "old-failed", "old-queued"} {
			enqueue(t, s, k, func(p *store.EnqueueParams) { p.Purpose = "marketing" })
		}
		enqueue(t, s, "old-otp", func(p *store.EnqueueParams) { p.Purpose = "otp" })
		for range 4 {
			c := claimOne(t, s, time.Minute)
			switch c.Key {
			case "old-sent", "old-otp":
				move(t, s, c.ID, state.Sending, state.Event{Kind: state.Accept}, &store.Attempt{Number: 1, StartedAt: clk.Now(), FinishedAt: clk.Now(), Class: "accepted"})
			case "old-failed":
				move(t, s, c.ID, state.Sending, state.Event{Kind: state.Fail, Reason: state.Permanent},
					&store.Attempt{Number: 1, StartedAt: clk.Now(), FinishedAt: clk.Now(), Class: "permanent", RawError: `{"error":{"code":131026}}`})
			case "old-queued": // back in the queue for an hour: not finished
				must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: "drain-1",
					Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, NextAttemptAt: clk.Now().Add(time.Hour)}))
			}
		}
		clk.Advance(100 * 24 * time.Hour)
		enqueue(t, s, "new-sent", func(p *store.EnqueueParams) { p.Purpose = "marketing" })
		c := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 10, Lane: store.LaneBulk}))
		for _, c := range c {
			if c.Key == "new-sent" {
				move(t, s, c.ID, state.Sending, state.Event{Kind: state.Accept}, nil)
			}
		}

		before := clk.Now().Add(-90 * 24 * time.Hour)
		if n := must[int](t)(s.MessagePurge(ctx, &store.PurgeParams{Before: before, Purpose: "marketing", DryRun: true})); n != 2 {
			t.Errorf("dry run: %d, want 2 (old-sent, old-failed)", n)
		}
		if m := must[*store.Message](t)(s.MessageGet(ctx, "", "old-sent")); m.Payload == nil {
			t.Fatal("a dry run purged")
		}
		if n := must[int](t)(s.MessagePurge(ctx, &store.PurgeParams{Before: before, Purpose: "marketing"})); n != 2 {
			t.Errorf("purged %d, want 2", n)
		}
		for key, purged := range map[string]bool{"old-sent": true, "old-failed": true, "old-queued": false, "old-otp": false, "new-sent": false} {
			m := must[*store.Message](t)(s.MessageGet(ctx, "", key))
			if (m.Payload == nil) != purged {
				t.Errorf("%s: payload %v, purged should be %v", key, m.Payload, purged)
			}
			if purged {
				for _, a := range must[[]store.Attempt](t)(s.MessageAttempts(ctx, m.ID)) {
					if a.RawError != "" {
						t.Errorf("%s: attempt keeps its raw error %q", key, a.RawError)
					}
				}
				if m.BodyHash == "" || m.State.Rank() < state.Sent.Rank() {
					t.Errorf("%s: lost its hash or state: %+v", key, m)
				}
			}
		}
		// A replay of a purged key is still a replay, never a new send; a
		// new body under it is still a conflict.
		p := Params("old-sent")
		p.Purpose = "marketing"
		r := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		if !r.Replayed || r.Message.State != state.Sent {
			t.Errorf("replay of a purged key: %+v", r)
		}
		p.Payload = store.Payload{Text: "another body"}
		if _, err := s.MessageEnqueue(ctx, &p); !errors.Is(err, store.ErrConflict) {
			t.Errorf("new body under a purged key: %v, want a conflict", err)
		}
		if n := must[int](t)(s.MessagePurge(ctx, &store.PurgeParams{Before: before})); n != 1 {
			t.Errorf("purging every purpose then: %d, want 1 (old-otp)", n)
		}
	})
}
