package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// challengeParams is an email-like first step (WhatsApp here: the store
// does not care which channel) and an SMS fallback after two minutes,
// with a ten-minute deadline.
func challengeParams(key string) store.ChallengeParams {
	first := Params(key)
	sms := Params(key)
	sms.Channel, sms.Identity = store.ChannelSMS, "sms-us"
	sms.Payload = store.Payload{Text: "Your code is 123456"}
	return store.ChallengeParams{Key: key, ExpiresIn: 10 * time.Minute,
		Steps: []store.ChallengeStepParams{{EnqueueParams: first}, {EnqueueParams: sms, After: 2 * time.Minute}}}
}

func testChallenge(t *testing.T, h Harness) {
	ctx := context.Background()
	claim := func(t *testing.T, s store.Store) []store.Claimed {
		t.Helper()
		return must[[]store.Claimed](t)(s.MessageClaim(ctx, &store.ClaimParams{Owner: "d", LeaseFor: time.Minute, Limit: 10}))
	}
	tick := func(t *testing.T, s store.Store) {
		t.Helper()
		must[int](t)(s.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain}))
	}
	get := func(t *testing.T, s store.Store, key string) *store.Challenge {
		t.Helper()
		return must[*store.Challenge](t)(s.ChallengeGet(ctx, "", key))
	}
	move := func(t *testing.T, s store.Store, c store.Claimed, ev state.Event) {
		t.Helper()
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c.ID, From: state.Sending, Event: ev,
			Source: store.SourceDrain, LeaseOwner: c.LeaseOwner}))
	}
	evidence := func(t *testing.T, s store.Store, id string, from, to state.State) {
		t.Helper()
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: id, From: from,
			Event: state.Event{Kind: state.Evidence, Status: to}, Source: store.SourceWebhook}))
	}
	// start enqueues a challenge and claims its first step.
	start := func(t *testing.T, s store.Store, p store.ChallengeParams) store.Claimed {
		t.Helper()
		must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p))
		tick(t, s)
		cs := claim(t, s)
		if len(cs) != 1 || cs[0].Key != p.Key {
			t.Fatalf("claimed %+v, want only step 1 (%s)", cs, p.Key)
		}
		return cs[0]
	}

	t.Run("enqueue writes every step; only step 1 is claimable; replay and conflict", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := challengeParams("signup-1")
		r := must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p))
		if r.Replayed || len(r.Challenge.Steps) != 2 || r.Challenge.Outcome != "open" {
			t.Fatalf("enqueue %+v", r)
		}
		c := get(t, s, "signup-1")
		if c.Steps[0].Message.Key != "signup-1" || c.Steps[1].Message.Key != "signup-1/2" || !c.Steps[0].Released || c.Steps[1].Released {
			t.Fatalf("steps %+v", c.Steps)
		}
		if c.Deadline == nil || !c.Deadline.Equal(t0.Truncate(store.Resolution).Add(10*time.Minute)) {
			t.Errorf("deadline %v", c.Deadline)
		}
		for _, st := range c.Steps {
			if st.Message.ExpiresAt == nil || !st.Message.ExpiresAt.Equal(*c.Deadline) {
				t.Errorf("step %d expires_at %v, want the deadline", st.Step, st.Message.ExpiresAt)
			}
		}
		// Both rows are ordinary rows: list and get see them.
		if ms := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{KeyPrefix: "signup-1"})); len(ms) != 2 {
			t.Errorf("list %d rows, want 2", len(ms))
		}
		if got := get(t, s, "signup-1/2"); got.ID != c.ID {
			t.Errorf("ChallengeGet by step 2's key: %s", got.ID)
		}
		clk.Advance(time.Hour) // long past step 2's time, and the deadline: still step 1 only
		cs := claim(t, s)
		if len(cs) > 1 || (len(cs) == 1 && cs[0].Key != "signup-1") {
			t.Fatalf("claimed %+v", cs)
		}
		again := must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p))
		if !again.Replayed || again.Challenge.ID != c.ID {
			t.Errorf("replay %+v", again)
		}
		other := challengeParams("signup-1")
		other.Steps[1].Payload.Text = "Your code is 654321"
		var ce *store.ConflictError
		if _, err := s.ChallengeEnqueue(ctx, &other); !errors.As(err, &ce) || ce.ExistingID != c.ID {
			t.Errorf("other steps: %v, want a conflict naming %s", err, c.ID)
		}
		single := Params("single-1")
		must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &single))
		clash := challengeParams("single-1")
		if _, err := s.ChallengeEnqueue(ctx, &clash); !errors.Is(err, store.ErrConflict) {
			t.Errorf("a single send's key: %v, want a conflict", err)
		}
		if _, err := s.ChallengeGet(ctx, "", "single-1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused challenge was written: %v", err)
		}
		bad := challengeParams("bad-1")
		bad.Steps[1].After = 11 * time.Minute
		var ie *store.InvalidError
		if _, err := s.ChallengeEnqueue(ctx, &bad); !errors.As(err, &ie) {
			t.Errorf("a step after the deadline: %v", err)
		}
	})

	t.Run("a failed step releases the next at its time, not before", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		c1 := start(t, s, challengeParams("fail-1"))
		move(t, s, c1, state.Event{Kind: state.Fail, Reason: state.Permanent})
		clk.Advance(time.Minute)
		tick(t, s)
		if cs := claim(t, s); len(cs) != 0 {
			t.Fatalf("claimed %+v before step 2's time", cs)
		}
		clk.Advance(time.Minute)
		tick(t, s)
		cs := claim(t, s)
		if len(cs) != 1 || cs[0].Key != "fail-1/2" {
			t.Fatalf("claimed %+v, want step 2", cs)
		}
		c := get(t, s, "fail-1")
		if !c.Steps[1].Released || c.Steps[1].Why == "" || c.Outcome != "open" {
			t.Errorf("challenge %+v", c)
		}
		move(t, s, cs[0], state.Event{Kind: state.Accept})
		tick(t, s)
		if c := get(t, s, "fail-1"); c.Outcome != "completed" || c.By != 2 {
			t.Errorf("outcome %s by %d, want completed by 2", c.Outcome, c.By)
		}
		if v := must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{})).Challenges; v.CompletedByStep["2"] != 1 || v.FallbacksFired != 1 {
			t.Errorf("vitals %+v", v)
		}
	})

	t.Run("a step canceled before its release is passed over, not retried for ever", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := challengeParams("held-1")
		third := p.Steps[1]
		third.Payload = store.Payload{Text: "Your code is 654321"}
		third.After = 4 * time.Minute
		p.Steps = append(p.Steps, third)
		c1 := start(t, s, p)
		move(t, s, c1, state.Event{Kind: state.Fail, Reason: state.Permanent})
		// An operator cancels step 2 while it is held.
		held := get(t, s, "held-1").Steps[1].Message
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: held.ID, From: state.Queued,
			Event: state.Event{Kind: state.Cancel}, Source: store.SourceOperator, Detail: "canceled by a test"}))
		clk.Advance(3 * time.Minute)
		tick(t, s)
		if cs := claim(t, s); len(cs) != 0 {
			t.Fatalf("claimed %+v before step 3's time", cs)
		}
		clk.Advance(2 * time.Minute)
		if n := must[int](t)(s.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain})); n != 1 {
			t.Fatalf("the tick applied %d plans; want step 3's release", n)
		}
		cs := claim(t, s)
		if len(cs) != 1 || cs[0].Key != "held-1/3" {
			t.Fatalf("claimed %+v, want step 3", cs)
		}
		if c := get(t, s, "held-1"); !c.Steps[2].Released || c.Outcome != "open" {
			t.Errorf("challenge %+v", c)
		}
	})

	t.Run("a queued step is canceled in the transaction that releases the next", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := challengeParams("slow-1")
		must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p))
		clk.Advance(2 * time.Minute)
		tick(t, s)
		cs := claim(t, s)
		if len(cs) != 1 || cs[0].Key != "slow-1/2" {
			t.Fatalf("claimed %+v, want step 2 only", cs)
		}
		c := get(t, s, "slow-1")
		if m := c.Steps[0].Message; m.State != state.Failed || m.Reason != state.Canceled {
			t.Errorf("step 1 %s %s, want failed canceled", m.State, m.Reason)
		}
		hs := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, c.Steps[0].Message.ID))
		if last := hs[len(hs)-1]; last.Event != "cancel" || last.Detail == "" {
			t.Errorf("history %+v", last)
		}
	})

	t.Run("an uncertain step blocks the fallback unless the duplicate risk is accepted", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		c1 := start(t, s, challengeParams("unk-1"))
		// As a drain writes an ambiguous answer: maybe_sent.
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c1.ID, From: state.Sending,
			Event: state.Event{Kind: state.Ambiguous}, Source: store.SourceDrain, LeaseOwner: c1.LeaseOwner, MaybeSent: true}))
		p := challengeParams("unk-2")
		p.AcceptDuplicateRisk = true
		c2 := start(t, s, p)
		move(t, s, c2, state.Event{Kind: state.Ambiguous})
		clk.Advance(3 * time.Minute)
		tick(t, s)
		cs := claim(t, s)
		if len(cs) != 1 || cs[0].Key != "unk-2/2" {
			t.Fatalf("claimed %+v, want unk-2's step 2 only", cs)
		}
		c := get(t, s, "unk-1")
		if c.Blocked != 1 || c.Outcome != "open" || c.Steps[1].Released || c.Steps[1].Why == "" {
			t.Errorf("blocked challenge %+v", c)
		}
		if v := must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{})).Challenges; v.Open != 2 || v.Blocked != 1 || v.FallbacksFired != 1 {
			t.Errorf("vitals while blocked %+v", v)
		}
		// Before the deadline the unknown steps are stuck, not past it.
		for _, m := range must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{State: state.Unknown})) {
			if m.PastDeadline(clk.Now()) {
				t.Errorf("%s is past its deadline before it", m.Key)
			}
		}
		// Past the deadline nothing is called, but nobody knows whether
		// the unknown steps reached the customer: they stay in stuck
		// (issue 24), marked past their deadline (a resend would come too
		// late), and keep maybe_sent.
		clk.Advance(10 * time.Minute)
		tick(t, s)
		if c := get(t, s, "unk-1"); c.Outcome != "expired" || c.Steps[1].Message.State != state.Failed {
			t.Errorf("after the deadline %s, step 2 %s", c.Outcome, c.Steps[1].Message.State)
		}
		stuck := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{State: state.Unknown}))
		if len(stuck) != 2 {
			t.Fatalf("stuck lists %d unknown rows past their deadline, want 2 (unk-1's and unk-2's step 1)", len(stuck))
		}
		for _, m := range stuck {
			if !m.PastDeadline(clk.Now()) || (m.ID == c1.ID && !m.MaybeSent) {
				t.Errorf("%s in stuck: past deadline %v, maybe_sent %v", m.Key, m.PastDeadline(clk.Now()), m.MaybeSent)
			}
		}
		if v := must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{})).Challenges; v.Expired != 2 || v.Open != 0 || v.UnknownPastDeadline != 2 {
			t.Errorf("vitals after the deadline %+v", v)
		}
		// Later evidence still moves a step forward, and out of stuck; a
		// person's verdict takes the other out.
		evidence(t, s, c1.ID, state.Unknown, state.Delivered)
		if m := get(t, s, "unk-1").Steps[0].Message; m.State != state.Delivered {
			t.Errorf("unk-1's step 1 after evidence: %s, want delivered", m.State)
		}
		must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: c2.ID, From: state.Unknown,
			Event: state.Event{Kind: state.Resolve, Status: state.Failed}, Source: store.SourceOperator, Detail: "no code arrived", Resolution: "failed by ops"}))
		if st := must[[]store.StuckMessage](t)(s.MessageStuck(ctx, &store.StuckParams{State: state.Unknown})); len(st) != 0 {
			t.Errorf("stuck lists %d unknown rows once both were settled", len(st))
		}
	})

	t.Run("a delivered step completes the challenge and cancels the rest", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := challengeParams("del-1")
		p.FallbackUndelivered = true
		c1 := start(t, s, p)
		move(t, s, c1, state.Event{Kind: state.Accept})
		evidence(t, s, c1.ID, state.Sent, state.Delivered)
		tick(t, s)
		c := get(t, s, "del-1")
		if c.Outcome != "completed" || c.By != 1 {
			t.Fatalf("outcome %s by %d", c.Outcome, c.By)
		}
		if m := c.Steps[1].Message; m.State != state.Failed || m.Reason != state.Canceled {
			t.Errorf("step 2 %s %s", m.State, m.Reason)
		}
		// The reason is in the canceled step's history (rule 4).
		hs := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, c.Steps[1].Message.ID))
		if last := hs[len(hs)-1]; last.Event != "cancel" || last.Detail != "challenge completed: step 1 was delivered" {
			t.Errorf("step 2's last history entry %+v, want the cancel naming the delivered step", last)
		}
		clk.Advance(5 * time.Minute)
		tick(t, s)
		if cs := claim(t, s); len(cs) != 0 {
			t.Errorf("claimed %+v after completion", cs)
		}
	})

	t.Run("supersedes cancels the old challenge's steps that have not gone out", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		c1 := start(t, s, challengeParams("gen-1"))
		move(t, s, c1, state.Event{Kind: state.Fail, Reason: state.Permanent})
		p2 := challengeParams("gen-2")
		p2.Supersedes = "gen-1"
		r := must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p2))
		if r.Superseded != 1 {
			t.Errorf("superseded %d steps, want 1", r.Superseded)
		}
		if v := must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{})).Challenges; v.SupersedingSends != 1 || v.Superseded != 1 || v.Open != 1 {
			t.Errorf("vitals after supersede %+v", v)
		}
		old := get(t, s, "gen-1")
		if old.Outcome != store.ChallengeSuperseded || old.Steps[1].Message.Reason != state.Canceled {
			t.Errorf("old %s, step 2 %s", old.Outcome, old.Steps[1].Message.Reason)
		}
		clk.Advance(3 * time.Minute)
		tick(t, s)
		for _, c := range claim(t, s) {
			if c.Key == "gen-1/2" {
				t.Errorf("the superseded step went out")
			}
		}
		none := challengeParams("gen-3")
		none.Supersedes = "nothing"
		var ie *store.InvalidError
		if _, err := s.ChallengeEnqueue(ctx, &none); !errors.As(err, &ie) {
			t.Errorf("supersedes an unknown key: %v", err)
		}
	})

	t.Run("creation to first delivery and expiries are measured over the window", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		// A: step 1 delivered after 30s. B: step 1 failed, step 2 released
		// at 2m and delivered at 2m10s. C: step 1 unknown, so the
		// fallback is blocked until the deadline expires it. D: step 1
		// sent, step 2 released when undelivered, step 2 delivered at 3m
		// and step 1 at 4m: its first delivery is step 2's.
		move(t, s, start(t, s, challengeParams("fd-a")), state.Event{Kind: state.Accept})
		a1 := get(t, s, "fd-a").Steps[0].Message.ID
		move(t, s, start(t, s, challengeParams("fd-b")), state.Event{Kind: state.Fail, Reason: state.Permanent})
		move(t, s, start(t, s, challengeParams("fd-c")), state.Event{Kind: state.Ambiguous})
		pd := challengeParams("fd-d")
		pd.FallbackUndelivered = true
		move(t, s, start(t, s, pd), state.Event{Kind: state.Accept})
		d1 := get(t, s, "fd-d").Steps[0].Message.ID
		clk.Advance(30 * time.Second)
		evidence(t, s, a1, state.Sent, state.Delivered)
		clk.Advance(90 * time.Second)
		tick(t, s)
		cs := claim(t, s)
		if len(cs) != 2 {
			t.Fatalf("claimed %+v, want the step 2s of fd-b and fd-d", cs)
		}
		ids := map[string]string{}
		for _, c := range cs {
			move(t, s, c, state.Event{Kind: state.Accept})
			ids[c.Key] = c.ID
		}
		clk.Advance(10 * time.Second)
		evidence(t, s, ids["fd-b/2"], state.Sent, state.Delivered)
		clk.Advance(50 * time.Second)
		evidence(t, s, ids["fd-d/2"], state.Sent, state.Delivered)
		clk.Advance(time.Minute)
		evidence(t, s, d1, state.Sent, state.Delivered)
		clk.Advance(7 * time.Minute) // t0+11m: past fd-c's deadline
		tick(t, s)
		stats := func(window time.Duration) store.ChallengeVitals {
			t.Helper()
			return must[*store.Stats](t)(s.Stats(ctx, &store.StatsParams{Window: window})).Challenges
		}
		for _, c := range []struct {
			window     time.Duration
			n, expired int
			p50, p95   time.Duration
		}{
			{time.Hour, 3, 1, 130 * time.Second, 3 * time.Minute},
			// From t0+2m: fd-a's delivery is before it.
			{9 * time.Minute, 2, 1, 130 * time.Second, 3 * time.Minute},
			// From t0+3m30s: fd-d has a delivery in it (step 1's), but
			// its first delivery is before: not counted.
			{7*time.Minute + 30*time.Second, 0, 1, 0, 0},
			// From t0+10m30s: fd-c's deadline (t0+10m) is before it.
			{30 * time.Second, 0, 0, 0, 0},
		} {
			v := stats(c.window)
			if v.RecentFirstDeliveries != c.n || v.FirstDeliveryP50 != c.p50 || v.FirstDeliveryP95 != c.p95 || v.RecentExpired != c.expired {
				t.Errorf("window %s: %d first deliveries p50 %s p95 %s, %d expired; want %d, %s, %s, %d", c.window,
					v.RecentFirstDeliveries, v.FirstDeliveryP50, v.FirstDeliveryP95, v.RecentExpired, c.n, c.p50, c.p95, c.expired)
			}
			if v.Expired != 1 {
				t.Errorf("window %s: %d expired in all, want 1", c.window, v.Expired)
			}
		}
	})

	t.Run("ticks racing on several handles release a step once", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		handles := []store.Store{s, h.Reopen(t, s), h.Reopen(t, s), h.Reopen(t, s)}
		for _, key := range []string{"race-1", "race-2", "race-3"} {
			p := challengeParams(key)
			must[*store.ChallengeResult](t)(s.ChallengeEnqueue(ctx, &p))
		}
		clk.Advance(2 * time.Minute)
		var wg sync.WaitGroup
		for _, hs := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every handle ticks at the test clock's time (a reopened
				// handle reads its own clock otherwise).
				if _, err := hs.ChallengeTick(ctx, &store.TickParams{Source: store.SourceDrain, Now: clk.Now()}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, key := range []string{"race-1", "race-2", "race-3"} {
			hs := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, get(t, s, key).Steps[0].Message.ID))
			cancels := 0
			for _, e := range hs {
				if e.Event == "cancel" {
					cancels++
				}
			}
			if cancels != 1 {
				t.Errorf("%s: step 1 canceled %d times", key, cancels)
			}
		}
		if cs := claim(t, s); len(cs) != 3 {
			t.Errorf("claimed %d step 2s, want 3", len(cs))
		}
	})
}
