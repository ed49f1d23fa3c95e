package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// testClock: times a caller gives as delays are resolved on the store's
// own clock (on a shared database, the one every host agrees on), and
// ClockNow reads that clock.
func testClock(t *testing.T, h Harness) {
	ctx := context.Background()
	claimOne := func(t *testing.T, s store.Store, key string) store.Claimed {
		t.Helper()
		p := Params(key)
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 1}))
		if len(cs) != 1 || cs[0].Key != key {
			t.Fatalf("claimed %+v, want %s", cs, key)
		}
		return cs[0]
	}

	t.Run("ClockNow reads the store's clock", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		if got := must[time.Time](t)(s.ClockNow(ctx)); !got.Equal(t0.Truncate(store.Resolution)) {
			t.Errorf("ClockNow %v, want %v", got, t0)
		}
		// On its own clock (PostgreSQL: the server's, here on this host).
		real := h.New(t, nil)
		if got := must[time.Time](t)(real.ClockNow(ctx)); got.Sub(time.Now()).Abs() > time.Minute {
			t.Errorf("ClockNow %v on a store of the real clock, this host says %v", got, time.Now())
		}
	})

	t.Run("not_before and expires_at given as delays count from the store's clock", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("delayed")
		p.NotBeforeIn, p.ExpiresIn = time.Hour, 2*time.Hour
		m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		now := t0.Truncate(store.Resolution)
		got := must[*store.Message](t)(s.MessageGet(ctx, "", m.ID))
		if !got.NextAttemptAt.Equal(now.Add(time.Hour)) || got.ExpiresAt == nil || !got.ExpiresAt.Equal(now.Add(2*time.Hour)) {
			t.Errorf("next_attempt_at %v expires_at %v, want %v and %v", got.NextAttemptAt, got.ExpiresAt, now.Add(time.Hour), now.Add(2*time.Hour))
		}
		// A replay an hour later is the same row, its times unchanged.
		clk.Advance(time.Hour)
		again := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		if !again.Replayed || !again.Message.NextAttemptAt.Equal(got.NextAttemptAt) {
			t.Errorf("replay %+v", again)
		}
		for name, change := range map[string]func(*store.EnqueueParams){
			"a deadline in the past":         func(p *store.EnqueueParams) { p.ExpiresIn = -time.Second },
			"a deadline before the schedule": func(p *store.EnqueueParams) { p.NotBeforeIn, p.ExpiresIn = 2*time.Hour, time.Hour },
			"a delayed deadline before an absolute schedule": func(p *store.EnqueueParams) {
				p.NotBefore, p.ExpiresIn = clk.Now().Add(2*time.Hour), time.Hour
			},
		} {
			p := Params("bad-" + name[:8])
			change(&p)
			if _, err := s.MessageEnqueue(ctx, &p); !isInvalid(err) {
				t.Errorf("%s: %v, want an *InvalidError", name, err)
			}
		}
	})

	t.Run("a retry given as a delay is due that long after the store's clock at the write", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		one, two := claimOne(t, s, "retry-one"), claimOne(t, s, "retry-two")
		clk.Advance(5 * time.Second)
		retry := func(c store.Claimed, in time.Duration) store.TransitionParams {
			return store.TransitionParams{ID: c.ID, From: state.Sending, LeaseOwner: "drain-1", Event: state.Event{Kind: state.Retry},
				Source: store.SourceDrain, NextAttemptIn: in}
		}
		must[*store.Message](t)(s.MessageTransition(ctx, func() *store.TransitionParams { p := retry(one, 30*time.Second); return &p }()))
		res := must[[]store.TransitionResult](t)(s.MessageTransitionMany(ctx, []store.TransitionParams{retry(two, time.Minute)}))
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		now := clk.Now().Truncate(store.Resolution)
		for _, c := range []struct {
			id   string
			want time.Time
		}{{one.ID, now.Add(30 * time.Second)}, {two.ID, now.Add(time.Minute)}} {
			if m := must[*store.Message](t)(s.MessageGet(ctx, "", c.id)); m.State != state.Queued || !m.NextAttemptAt.Equal(c.want) {
				t.Errorf("%s: %s due %v, want queued due %v", c.id, m.State, m.NextAttemptAt, c.want)
			}
		}
	})

	t.Run("on the store's own clock, a delayed retry and its write share one reading", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		c := claimOne(t, s, "own-clock")
		res := must[[]store.TransitionResult](t)(s.MessageTransitionMany(ctx, []store.TransitionParams{{ID: c.ID, From: state.Sending,
			LeaseOwner: "drain-1", Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, NextAttemptIn: time.Hour}}))
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		m := must[*store.Message](t)(s.MessageGet(ctx, "", c.ID))
		if d := m.NextAttemptAt.Sub(m.UpdatedAt); d != time.Hour {
			t.Errorf("due %s after the write, want 1h (updated %v, due %v)", d, m.UpdatedAt, m.NextAttemptAt)
		}
	})
}
