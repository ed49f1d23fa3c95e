package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func testClaim(t *testing.T, h Harness) {
	ctx := context.Background()
	enqueue := func(t *testing.T, s store.Store, key string, change func(*store.EnqueueParams)) *store.Message {
		t.Helper()
		p := Params(key)
		if change != nil {
			change(&p)
		}
		return must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
	}
	claim := func(t *testing.T, s store.Store, p store.ClaimParams) []store.Claimed {
		t.Helper()
		if p.Owner == "" {
			p.Owner = "drain-1"
		}
		if p.LeaseFor == 0 {
			p.LeaseFor = time.Minute
		}
		if p.Limit == 0 {
			p.Limit = 100
		}
		return must[[]store.Claimed](t)(s.MessageClaim(ctx, &p))
	}
	keys := func(cs []store.Claimed) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Key)
		}
		return fmt.Sprint(out)
	}

	t.Run("a claim leases due rows reply lane first and counts the attempt", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		enqueue(t, s, "bulk-1", nil)
		clk.Advance(time.Second)
		enqueue(t, s, "reply-1", func(p *store.EnqueueParams) { p.Lane = store.LaneReply })
		enqueue(t, s, "later", func(p *store.EnqueueParams) { p.NotBefore = t0.Add(time.Hour) })
		clk.Advance(time.Second)
		got := claim(t, s, store.ClaimParams{})
		if keys(got) != "[reply-1 bulk-1]" {
			t.Fatalf("claimed %s, want reply-1 then bulk-1 (later is not due)", keys(got))
		}
		now := clk.Now().Truncate(store.Resolution)
		for _, c := range got {
			if c.State != state.Sending || c.Attempts != 1 || c.LeaseOwner != "drain-1" || c.LeaseUntil == nil ||
				!c.LeaseUntil.Equal(now.Add(time.Minute)) || !c.SlotAt.Equal(now) {
				t.Errorf("claimed row %+v", c)
			}
			m := must[*store.Message](t)(s.MessageGet(ctx, "", c.ID))
			if m.State != state.Sending || m.Attempts != 1 || m.LeaseOwner != "drain-1" {
				t.Errorf("stored row after claim: %+v", m)
			}
			hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, c.ID))
			if len(hist) != 2 || hist[1].Event != string(state.Claim) || hist[1].Source != store.SourceDrain || hist[1].To != state.Sending {
				t.Errorf("history after claim: %+v", hist)
			}
		}
		if again := claim(t, s, store.ClaimParams{Owner: "drain-2"}); len(again) != 0 {
			t.Errorf("a second drain claimed leased rows: %s", keys(again))
		}
	})

	t.Run("the lease holder records the outcome and a retry puts the row back", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		m := enqueue(t, s, "k", nil)
		c := claim(t, s, store.ClaimParams{})[0]
		_, err := s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Sending, LeaseOwner: "someone-else",
			Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain})
		if !errors.Is(err, store.ErrStale) {
			t.Errorf("an outcome from a drain without the lease: err = %v, want ErrStale", err)
		}
		next := t0.Add(time.Minute).Truncate(store.Resolution)
		got := must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c.ID, From: state.Sending,
			LeaseOwner: "drain-1", Event: state.Event{Kind: state.Retry}, Source: store.SourceDrain, NextAttemptAt: next,
			Attempt: &store.Attempt{Number: c.Attempts, Class: "transient", HTTPStatus: 503}}))
		if got.State != state.Queued || got.LeaseOwner != "" || got.LeaseUntil != nil || !got.NextAttemptAt.Equal(next) || got.Attempts != 1 {
			t.Errorf("row after retry: %+v", got)
		}
		if cs := claim(t, s, store.ClaimParams{}); len(cs) != 0 {
			t.Errorf("a row scheduled for later was claimed: %s", keys(cs))
		}
		clk.Advance(time.Minute)
		if cs := claim(t, s, store.ClaimParams{}); len(cs) != 1 || cs[0].Attempts != 2 {
			t.Errorf("second claim: %+v", cs)
		}
	})

	t.Run("due rows past their deadline fail as expired instead of being claimed", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		m := enqueue(t, s, "short", func(p *store.EnqueueParams) { p.ExpiresAt = t0.Add(time.Minute) })
		enqueue(t, s, "long", func(p *store.EnqueueParams) { p.ExpiresAt = t0.Add(time.Hour) })
		clk.Advance(2 * time.Minute)
		if got := claim(t, s, store.ClaimParams{}); keys(got) != "[long]" {
			t.Errorf("claimed %s, want only long", keys(got))
		}
		got := must[*store.Message](t)(s.MessageGet(ctx, "", m.ID))
		if got.State != state.Failed || got.Reason != state.Expired {
			t.Errorf("expired row is %s(%s)", got.State, got.Reason)
		}
	})

	t.Run("paused identities keep their rows queued until resumed", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		enqueue(t, s, "a", func(p *store.EnqueueParams) { p.Identity = "shop" })
		enqueue(t, s, "b", func(p *store.EnqueueParams) { p.Identity = "other" })
		if err := s.IdentityPause(ctx, "shop", "token expired (190)"); err != nil {
			t.Fatal(err)
		}
		states := must[[]store.IdentityState](t)(s.IdentityStates(ctx))
		if len(states) != 2 || states[1].Name != "shop" || !states[1].Paused || states[1].Reason != "token expired (190)" ||
			states[1].Queued != 1 || states[1].PausedAt == nil || states[0].Name != "other" || states[0].Paused {
			t.Errorf("identity states: %+v", states)
		}
		if got := claim(t, s, store.ClaimParams{}); keys(got) != "[b]" {
			t.Errorf("claimed %s, want only b", keys(got))
		}
		if err := s.IdentityResume(ctx, "shop"); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, s, store.ClaimParams{}); keys(got) != "[a]" {
			t.Errorf("after resume claimed %s, want a", keys(got))
		}
		if err := s.IdentityResume(ctx, "never-paused"); err != nil {
			t.Errorf("resuming an identity that was never paused: %v", err)
		}
	})

	t.Run("claims filter by lane and identity and respect the limit", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		for i := range 5 {
			enqueue(t, s, fmt.Sprintf("r%d", i), func(p *store.EnqueueParams) { p.Lane = store.LaneReply; p.Identity = "shop" })
			enqueue(t, s, fmt.Sprintf("b%d", i), func(p *store.EnqueueParams) { p.Identity = "other" })
		}
		if got := claim(t, s, store.ClaimParams{Lane: store.LaneBulk, Limit: 2}); keys(got) != "[b0 b1]" {
			t.Errorf("bulk lane, limit 2: %s", keys(got))
		}
		if got := claim(t, s, store.ClaimParams{Identities: []string{"shop"}, Limit: 3}); keys(got) != "[r0 r1 r2]" {
			t.Errorf("identity shop, limit 3: %s", keys(got))
		}
		if _, err := s.MessageClaim(ctx, &store.ClaimParams{Owner: "x", LeaseFor: time.Minute, Limit: 1, Lane: "fast"}); !isInvalid(err) {
			t.Errorf("unknown lane: err = %v", err)
		}
	})

	t.Run("pacing spaces an identity's calls and a recipient's messages", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		for i := range 12 {
			if i < 6 {
				enqueue(t, s, fmt.Sprintf("a%d", i), func(p *store.EnqueueParams) { p.To = "+15550000001" })
			}
			enqueue(t, s, fmt.Sprintf("b%d", i), func(p *store.EnqueueParams) { p.To = fmt.Sprintf("+155500001%02d", i) })
		}
		pacing := map[string]store.Pacing{"sim": {Spacing: 100 * time.Millisecond, PerRecipient: 6 * time.Second}}
		got := claim(t, s, store.ClaimParams{Pacing: pacing, Horizon: time.Second})
		// Ten slots fit in one second at 10/s; recipient a gets one of them.
		if keys(got) != "[a0 b0 b1 b2 b3 b4 b5 b6 b7 b8]" {
			t.Fatalf("claimed %s, want a0 and b0-b8 (one second of slots at 10/s, one for recipient a)", keys(got))
		}
		perRcpt := map[string]int{}
		for i, c := range got {
			perRcpt[c.To]++
			want := clk.Now().Truncate(store.Resolution).Add(time.Duration(i) * 100 * time.Millisecond)
			if !c.SlotAt.Equal(want) {
				t.Errorf("row %d slot %v, want %v", i, c.SlotAt, want)
			}
		}
		if perRcpt["+15550000001"] != 1 {
			t.Errorf("recipient a got %d slots within its 6 s interval", perRcpt["+15550000001"])
		}
		// A second drain shares the pacing: the identity's next second is
		// not free until the first second's slots have passed.
		other := h.Reopen(t, s)
		got2 := must[[]store.Claimed](t)(other.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-2", LeaseFor: time.Minute,
			Limit: 100, Pacing: pacing, Horizon: 50 * time.Millisecond, Now: clk.Now()}))
		if len(got2) != 0 {
			t.Errorf("a second drain claimed %d rows into slots the first holds", len(got2))
		}
		clk.Advance(7 * time.Second)
		got3 := claim(t, s, store.ClaimParams{Owner: "drain-3", Pacing: pacing})
		if keys(got3) != "[a1 b9 b10 b11]" {
			t.Errorf("after 7 s claimed %s, want a1 (its 6 s passed) and the b rows left", keys(got3))
		}
	})

	t.Run("a deferred slot holds back the identity or one recipient for every drain", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		enqueue(t, s, "a", func(p *store.EnqueueParams) { p.To = "+15550000001" })
		enqueue(t, s, "b", func(p *store.EnqueueParams) { p.To = "+15550000002" })
		if err := s.PaceDefer(ctx, "sim", "+15550000001", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		pacing := map[string]store.Pacing{"sim": {}}
		if got := claim(t, s, store.ClaimParams{Pacing: pacing, Limit: 1}); keys(got) != "[b]" {
			t.Errorf("with recipient a deferred, claimed %s, want b", keys(got))
		}
		enqueue(t, s, "c", func(p *store.EnqueueParams) { p.To = "+15550000003" })
		if err := s.PaceDefer(ctx, "sim", "", t0.Add(30*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := s.PaceDefer(ctx, "sim", "", t0.Add(10*time.Second)); err != nil { // earlier: no change
			t.Fatal(err)
		}
		if got := claim(t, s, store.ClaimParams{Pacing: map[string]store.Pacing{"sim": {Spacing: time.Millisecond}}}); len(got) != 0 {
			t.Errorf("with the identity deferred, claimed %s", keys(got))
		}
		if got := claim(t, s, store.ClaimParams{Pacing: pacing}); len(got) != 0 {
			t.Errorf("with the identity deferred, a claim without limits took %s", keys(got))
		}
		clk.Advance(30 * time.Second)
		if got := claim(t, s, store.ClaimParams{Pacing: map[string]store.Pacing{"sim": {Spacing: time.Millisecond}}}); keys(got) != "[c]" {
			t.Errorf("after the identity's deferral claimed %s, want c (a is still deferred)", keys(got))
		}
	})

	t.Run("an identity without limits starts its calls when a deferral ends", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		enqueue(t, s, "a", func(p *store.EnqueueParams) { p.To = "+15550000001" })
		enqueue(t, s, "b", func(p *store.EnqueueParams) { p.To = "+15550000002" })
		if err := s.PaceDefer(ctx, "sim", "", t0.Add(300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := s.PaceDefer(ctx, "sim", "+15550000002", t0.Add(600*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		got := claim(t, s, store.ClaimParams{Pacing: map[string]store.Pacing{"sim": {}}, Horizon: time.Second})
		if keys(got) != "[a b]" {
			t.Fatalf("claimed %s, want a and b (both deferrals end within the horizon)", keys(got))
		}
		at := func(d time.Duration) time.Time { return t0.Add(d).Truncate(store.Resolution) }
		if !got[0].SlotAt.Equal(at(300*time.Millisecond)) || !got[1].SlotAt.Equal(at(600*time.Millisecond)) {
			t.Errorf("slots %s and %s, want the identity's deferral (+300ms) and b's own (+600ms)", got[0].SlotAt, got[1].SlotAt)
		}
	})

	t.Run("a recipient with a long queue does not starve the rows behind it", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		batch := make([]store.EnqueueParams, 0, 130)
		for i := range 100 {
			p := Params(fmt.Sprintf("busy-%03d", i))
			p.To = "+15550000001"
			batch = append(batch, p)
		}
		for i := range 30 {
			p := Params(fmt.Sprintf("other-%02d", i))
			p.To = fmt.Sprintf("+155500002%02d", i)
			batch = append(batch, p)
		}
		must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, batch))
		pacing := map[string]store.Pacing{"sim": {PerRecipient: time.Minute}}
		first := claim(t, s, store.ClaimParams{Limit: 10, Pacing: pacing})
		second := claim(t, s, store.ClaimParams{Limit: 10, Pacing: pacing})
		if len(second) != 10 {
			t.Errorf("after the busy recipient's one slot, a claim of 10 got %d (first claim %s)", len(second), keys(first))
		}
		for _, c := range second {
			if c.To == "+15550000001" {
				t.Errorf("the busy recipient got %s within its interval", c.Key)
			}
		}
	})

	t.Run("concurrent drains never claim one row twice", func(t *testing.T) {
		t.Parallel()
		first := h.New(t, nil)
		const n = 300
		batch := make([]store.EnqueueParams, n)
		for i := range batch {
			batch[i] = Params(fmt.Sprintf("c-%d", i))
		}
		must[[]store.EnqueueResult](t)(first.MessageEnqueueMany(ctx, batch))
		handles := []store.Store{first, h.Reopen(t, first), h.Reopen(t, first), h.Reopen(t, first)}
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		for i, st := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("drain-%d", i)
				for {
					cs, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: owner, LeaseFor: time.Minute, Limit: 7})
					if err != nil {
						t.Errorf("%s: %v", owner, err)
						return
					}
					if len(cs) == 0 {
						return
					}
					mu.Lock()
					for _, c := range cs {
						if prev, dup := seen[c.ID]; dup {
							t.Errorf("%s claimed %s, already claimed by %s", owner, c.Key, prev)
						}
						seen[c.ID] = owner
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) != n {
			t.Errorf("%d rows claimed, want %d", len(seen), n)
		}
	})
}
