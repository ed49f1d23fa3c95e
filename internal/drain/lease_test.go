package drain_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

func TestLeaseCheckNeedsTheWholeCallByBothClocks(t *testing.T) {
	t.Parallel()
	wall0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	start := drain.LeaseStart{Mono: time.Hour, Wall: wall0}
	const lease, call = 12 * time.Second, 2 * time.Second
	for _, c := range []struct {
		name       string
		mono, wall time.Duration // elapsed since the claim was asked for
		wait       time.Duration
		ok         bool
		why        string
	}{
		{"fresh", 0, 0, 0, true, ""},
		{"exactly the call and the margin left", 9 * time.Second, 9 * time.Second, 0, true, ""},
		{"a moment less", 9*time.Second + time.Millisecond, 9 * time.Second, 0, false, "2.999s of the 12s lease left by the monotonic clock"},
		{"frozen past the lease (SIGSTOP: both clocks ran)", 20 * time.Second, 20 * time.Second, 0, false, "-8s of the 12s lease left"},
		{"suspended (the monotonic clock stood still)", time.Second, 40 * time.Second, 0, false, "-28s of the 12s lease left by the wall clock"},
		{"wall clock stepped forward", time.Second, 10 * time.Minute, 0, false, "by the wall clock"},
		{"wall clock stepped back: the monotonic clock decides", time.Second, -10 * time.Minute, 0, true, ""},
		{"wall clock stepped back, and frozen", 11 * time.Second, -10 * time.Minute, 0, false, "1s of the 12s lease left by the monotonic clock"},
		{"a slot that still leaves room", 0, 0, 9 * time.Second, true, ""},
		{"a slot too close to the lease's end", 2 * time.Second, 2 * time.Second, 8 * time.Second, false,
			"the pacing slot is 8s away and would leave 2s of the 12s lease by the monotonic clock; the call needs 2s (call timeout) + 1s"},
		{"a slot in the past counts as none", 0, 0, -time.Minute, true, ""},
	} {
		ok, why := drain.LeaseCheck(start, lease, call, c.wait, start.Mono+c.mono, wall0.Add(c.wall))
		if ok != c.ok || !strings.Contains(why, c.why) || (ok && why != "") {
			t.Errorf("%s: ok %v, why %q; want %v, %q", c.name, ok, why, c.ok, c.why)
		}
	}
}

// counting counts the calls a provider gets.
type counting struct {
	provider.Provider
	calls atomic.Int32
}

func (p *counting) Send(ctx context.Context, m *provider.Message) provider.Result {
	p.calls.Add(1)
	return p.Provider.Send(ctx, m)
}

// steppedWall is a wall clock that jumps by step after its first reading:
// the first claim is asked for before the jump, everything after reads
// the jumped clock.
func steppedWall(step time.Duration) func() time.Time {
	var n atomic.Int32
	return func() time.Time {
		if n.Add(1) == 1 {
			return time.Now().Round(0)
		}
		return time.Now().Round(0).Add(step)
	}
}

// TestARowWhoseLeaseCheckFailsIsGivenBackWithoutACall: a wall clock that
// jumps an hour (a suspended host, a stepped clock) between the claim and
// the call. Every row of that claim goes back to the queue without a
// call, with its attempt count as it was and a history entry saying why;
// the next claim, counted from the jumped clock, sends each once.
func TestARowWhoseLeaseCheckFailsIsGivenBackWithoutACall(t *testing.T) {
	t.Parallel()
	s := setup(t, 5, nil)
	p := &counting{Provider: sim.New(sim.DefaultConfig()).Provider()}
	cfg := config(s, p)
	cfg.Wall = steppedWall(time.Hour)
	sum := runUntilIdle(t, s, cfg)
	if sum.GivenBack != 5 || sum.Sent != 5 || sum.Claimed != 10 || p.calls.Load() != 5 {
		t.Errorf("summary %+v, %d calls; want 5 given back, then 5 claimed again and sent with 5 calls", sum, p.calls.Load())
	}
	ms := must[[]store.Message](t)(s.MessageList(context.Background(), &store.ListParams{Limit: 10}))
	for _, m := range ms {
		if m.State != state.Sent || m.Attempts != 1 {
			t.Errorf("%s: %s with %d attempts, want sent with 1 (the give-back counts none)", m.Key, m.State, m.Attempts)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(context.Background(), m.ID))
		var back *store.HistoryEntry
		for i := range hist {
			if strings.HasPrefix(hist[i].Detail, "lease check: ") {
				back = &hist[i]
			}
		}
		if back == nil || back.From != state.Sending || back.To != state.Queued || !back.Applied ||
			!strings.Contains(back.Detail, "by the wall clock") || !strings.HasSuffix(back.Detail, "given back without a call") {
			t.Errorf("%s: history %+v, want an applied give-back saying why", m.Key, hist)
		}
		if atts := must[[]store.Attempt](t)(s.MessageAttempts(context.Background(), m.ID)); len(atts) != 1 {
			t.Errorf("%s: %d attempt rows, want 1", m.Key, len(atts))
		}
	}
}

// TestTheLeaseIsCheckedRightBeforeTheCall: the process stalls after the
// claim's check (here: in the customer-service window read, just before
// the call) for longer than the lease. The check right before the call
// catches it on the monotonic clock.
func TestTheLeaseIsCheckedRightBeforeTheCall(t *testing.T) {
	t.Parallel()
	s := setup(t, 1, func(_ int, p *store.EnqueueParams) { p.Payload = store.Payload{Text: "hi"} })
	p := &counting{Provider: sim.New(sim.DefaultConfig()).Provider()}
	cfg := config(s, p)
	// One slot: with more, the loop may ask for its next claim (and read
	// the clock for its lease start) while the stall below is under way,
	// and that claim's row is then rightly given back at its first check,
	// a second give-back this test does not mean to count.
	cfg.Concurrency = 1
	var mu sync.Mutex
	var frozen time.Duration
	cfg.Mono = func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(time.Now().UnixNano()) + frozen
	}
	var stalls atomic.Int32
	cfg.WindowClosed = func(context.Context, string, string) bool {
		if stalls.Add(1) == 1 {
			mu.Lock()
			frozen += 6 * time.Minute // longer than the default 5m lease
			mu.Unlock()
		}
		return false
	}
	sum := runUntilIdle(t, s, cfg)
	// Two window reads: the first stalled and its row was given back
	// after it, right before the call; the second claim's went through.
	if sum.GivenBack != 1 || sum.Sent != 1 || p.calls.Load() != 1 || stalls.Load() != 2 {
		t.Errorf("summary %+v, %d calls, %d window reads; want the row given back once after the stalled read, then sent with 1 call",
			sum, p.calls.Load(), stalls.Load())
	}
	for _, m := range must[[]store.Message](t)(s.MessageList(context.Background(), &store.ListParams{Limit: 10})) {
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(context.Background(), m.ID))
		n := 0
		for _, h := range hist {
			if strings.HasPrefix(h.Detail, "lease check: ") && strings.Contains(h.Detail, "by the monotonic clock") {
				n++
			}
		}
		if n != 1 || m.Attempts != 1 || m.State != state.Sent {
			t.Errorf("%s: %s, %d attempts, %d give-backs; want sent, 1, 1", m.Key, m.State, m.Attempts, n)
		}
	}
}

// blocking answers every call only when released.
type blocking struct {
	inFlight chan string
	release  chan struct{}
}

func (p *blocking) Send(_ context.Context, m *provider.Message) provider.Result {
	p.inFlight <- m.ID
	<-p.release
	return provider.Result{Class: retry.Accepted, ProviderID: "msg_late", HTTPStatus: 202}
}

func (p *blocking) Idempotent() bool { return false }

// TestALateAnswerIsKeptOnTheRowItWasAbout: the call is made, and before
// its answer comes back the row is taken over (reconcile made it unknown).
// The answer is not applied, but it is on the row: an attempt and a
// history entry that changed nothing.
func TestALateAnswerIsKeptOnTheRowItWasAbout(t *testing.T) {
	t.Parallel()
	s := setup(t, 1, nil)
	p := &blocking{inFlight: make(chan string, 1), release: make(chan struct{})}
	cfg := config(s, p)
	cfg.CallTimeout = time.Minute
	done := make(chan drain.Summary)
	go func() {
		sum, err := drain.Run(context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		done <- sum
	}()
	id := <-p.inFlight
	// Reconcile, as it would run once the lease and the margin are over.
	later := time.Now().Add(5*time.Minute + store.TakeoverMargin + time.Second)
	must[*store.Message](t)(s.MessageTransition(context.Background(), &store.TransitionParams{ID: id, From: state.Sending,
		Event: state.Event{Kind: state.LeaseExpired}, Source: store.SourceReconcile, Detail: "lease expired", Now: later}))
	close(p.release)
	sum := <-done
	if sum.LeaseLost != 1 || sum.Sent != 0 {
		t.Errorf("summary %+v, want the one lease lost", sum)
	}
	m := must[*store.Message](t)(s.MessageGet(context.Background(), "", id))
	if m.State != state.Unknown || m.ProviderID != "" {
		t.Errorf("row %s, provider id %q: the late answer must not be applied", m.State, m.ProviderID)
	}
	atts := must[[]store.Attempt](t)(s.MessageAttempts(context.Background(), id))
	if len(atts) != 1 || atts[0].Class != string(retry.Accepted) || atts[0].HTTPStatus != 202 {
		t.Errorf("attempts %+v, want the late call's", atts)
	}
	hist := must[[]store.HistoryEntry](t)(s.MessageHistory(context.Background(), id))
	last := hist[len(hist)-1]
	if last.Applied || last.Event != "accept" || last.From != state.Unknown || last.Source != store.SourceDrain ||
		!strings.Contains(last.Detail, "not applied: the row moved on before test-drain recorded this (it is unknown)") {
		t.Errorf("last history entry %+v, want the late answer, not applied", last)
	}
}

// runUntilIdle runs cron drains until nothing is queued (a row given back
// may be recorded after its run found nothing left to claim: the next
// run takes it) and adds up what they did.
func runUntilIdle(t *testing.T, s store.Store, cfg drain.Config) drain.Summary {
	t.Helper()
	var total drain.Summary
	for range 50 {
		sum, err := drain.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		total.Claimed += sum.Claimed
		total.Sent += sum.Sent
		total.GivenBack += sum.GivenBack
		total.LeaseLost += sum.LeaseLost
		if q := must[[]store.Message](t)(s.MessageList(context.Background(), &store.ListParams{State: state.Queued, Limit: 1})); len(q) == 0 {
			return total
		}
	}
	t.Fatal("rows still queued after 50 drains")
	return total
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
