package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// testDailyRecipients: the daily unique-recipient limit, kept in the claim.
func testDailyRecipients(t *testing.T, h Harness) {
	ctx := context.Background()
	enqueue := func(t *testing.T, s store.Store, key, to string) {
		t.Helper()
		p := Params(key)
		p.To = to
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
	}
	claim := func(t *testing.T, s store.Store, limit int) map[string]bool {
		t.Helper()
		cs := must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "drain-1", LeaseFor: time.Minute, Limit: 100,
			DailyRecipients: map[string]int{"sim": limit}}))
		out := map[string]bool{}
		for _, c := range cs {
			out[c.Key] = true
		}
		return out
	}
	used := func(t *testing.T, s store.Store) int {
		t.Helper()
		return must[map[string]int](t)(s.DailyRecipientsUsed(ctx, []string{"sim", "other"}))["sim"]
	}

	t.Run("a new recipient past the limit is held; known recipients go on; a place frees after 24h", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		enqueue(t, s, "a-1", "+15550000001")
		enqueue(t, s, "b-1", "+15550000002")
		enqueue(t, s, "a-2", "+15550000001")
		enqueue(t, s, "c-1", "+15550000003")
		clk.Advance(time.Second)
		t1 := clk.Now().Truncate(store.Resolution)
		if got := claim(t, s, 2); len(got) != 3 || !got["a-1"] || !got["b-1"] || !got["a-2"] {
			t.Fatalf("claimed %v, want a-1, b-1 and a-2 (two recipients), c-1 held", got)
		}
		if n := used(t, s); n != 2 {
			t.Errorf("used %d, want 2", n)
		}
		c := must[*store.Message](t)(s.MessageGet(ctx, "", "c-1"))
		if c.State != state.Queued || c.Attempts != 0 || !c.NextAttemptAt.Equal(t1.Add(store.DailyWindow)) || !strings.HasPrefix(c.LastError, store.DailyHeldError) {
			t.Errorf("held row: %s, %d attempts, next %s, last_error %q; want queued, due %s", c.State, c.Attempts, c.NextAttemptAt, c.LastError, t1.Add(store.DailyWindow))
		}
		// An hour on: a row to a recipient messaged within 24h goes on;
		// one to a new recipient is held.
		clk.Advance(time.Hour)
		t2 := clk.Now().Truncate(store.Resolution)
		enqueue(t, s, "a-3", "+15550000001")
		enqueue(t, s, "d-1", "+15550000004")
		if got := claim(t, s, 2); len(got) != 1 || !got["a-3"] {
			t.Fatalf("claimed %v, want a-3 only", got)
		}
		// Without a limit the same claim would take d-1: the limit is the
		// claim's parameter, not a property of the rows.
		// 24h after the first claim b's place frees (a was messaged again
		// at t2): c-1 and d-1 are due, one goes, the other waits for a's.
		clk.Advance(t1.Add(store.DailyWindow).Sub(clk.Now()))
		got := claim(t, s, 2)
		if len(got) != 1 || !(got["c-1"] || got["d-1"]) {
			t.Fatalf("claimed %v at 24h, want one of c-1, d-1", got)
		}
		if n := used(t, s); n != 2 {
			t.Errorf("used %d at 24h, want 2", n)
		}
		for _, k := range []string{"c-1", "d-1"} {
			if got[k] {
				continue
			}
			m := must[*store.Message](t)(s.MessageGet(ctx, "", k))
			if want := t2.Add(store.DailyWindow); m.State != state.Queued || !m.NextAttemptAt.Equal(want) {
				t.Errorf("%s: %s, next %s; want queued until %s (when a's place frees)", k, m.State, m.NextAttemptAt, want)
			}
		}
	})

	t.Run("claims racing on several handles never exceed the limit", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		const recipients, limit = 40, 7
		var ps []store.EnqueueParams
		for i := range recipients * 3 {
			p := Params(fmt.Sprintf("r-%03d", i))
			p.To = fmt.Sprintf("+1555%07d", i%recipients)
			ps = append(ps, p)
		}
		must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, ps))
		handles := []store.Store{s, h.Reopen(t, s), h.Reopen(t, s), h.Reopen(t, s)}
		var mu sync.Mutex
		seen := map[string]bool{}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10 {
					cs, err := handles[i%len(handles)].MessageClaim(ctx, &store.ClaimParams{Owner: fmt.Sprintf("drain-%d", i), LeaseFor: time.Minute,
						Limit: 3, DailyRecipients: map[string]int{"sim": limit}})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, c := range cs {
						seen[c.To] = true
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) != limit {
			t.Errorf("claims reached %d recipients, want exactly the limit %d", len(seen), limit)
		}
		if n := used(t, s); n != limit {
			t.Errorf("used %d, want %d", n, limit)
		}
	})
}
