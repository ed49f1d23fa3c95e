package drain_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

func setup(t *testing.T, n int, change func(i int, p *store.EnqueueParams)) *sqlite.Store {
	return setupTB(t, n, change)
}

func setupB(b *testing.B, n int) *sqlite.Store { return setupTB(b, n, nil) }

func setupTB(t testing.TB, n int, change func(i int, p *store.EnqueueParams)) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ps := make([]store.EnqueueParams, n)
	for i := range ps {
		ps[i] = storetest.Params(fmt.Sprintf("k-%04d", i))
		ps[i].To = fmt.Sprintf("+1555%07d", i)
		if change != nil {
			change(i, &ps[i])
		}
	}
	res, err := s.MessageEnqueueMany(context.Background(), ps)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return s
}

// fastPolicy retries within milliseconds so tests can drain to the end.
var fastPolicy = retry.Policy{Base: time.Millisecond, Factor: 2, Cap: 5 * time.Millisecond, MaxAttempts: 8}

func config(s store.Store, p provider.Provider) drain.Config {
	return drain.Config{Store: s, Owner: "test-drain", Concurrency: 8,
		Identities: map[string]*drain.Identity{"sim": {Name: "sim", Provider: p, Policy: fastPolicy}}}
}

// drainAll runs cron-style drains until no row is queued any more (rate
// limits ask for a second's wait, so this takes a few seconds).
func drainAll(t *testing.T, s store.Store, cfg drain.Config) drain.Summary {
	t.Helper()
	var total drain.Summary
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		sum, err := drain.Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		total.Claimed += sum.Claimed
		total.Sent += sum.Sent
		total.Failed += sum.Failed
		total.Unknown += sum.Unknown
		total.Retried += sum.Retried
		queued, err := s.MessageList(context.Background(), &store.ListParams{State: state.Queued, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(queued) == 0 {
			return total
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("rows still queued after a minute of drains")
	return total
}

func countStates(t *testing.T, s store.Store) map[state.State]int {
	t.Helper()
	ms, err := s.MessageList(context.Background(), &store.ListParams{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[state.State]int{}
	for _, m := range ms {
		out[m.State]++
	}
	return out
}

func TestCronDrainSendsEverythingOnceAndExitsWhenIdle(t *testing.T) {
	t.Parallel()
	s := setup(t, 200, nil)
	sm := sim.New(sim.DefaultConfig())
	sum, err := drain.Run(context.Background(), config(s, sm.Provider()))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Claimed != 200 || sum.Sent != 200 {
		t.Errorf("summary %+v, want 200 claimed and sent", sum)
	}
	if got := countStates(t, s); got[state.Sent] != 200 {
		t.Errorf("states %v, want 200 sent", got)
	}
	keys := map[string]int{}
	for _, d := range sm.Deliveries() {
		keys[d.Key]++
	}
	if len(keys) != 200 {
		t.Errorf("%d keys delivered, want 200", len(keys))
	}
	for k, n := range keys {
		if n != 1 {
			t.Errorf("key %s delivered %d times", k, n)
		}
	}
	m, err := s.MessageGet(context.Background(), "", "k-0007")
	if err != nil {
		t.Fatal(err)
	}
	atts, err := s.MessageAttempts(context.Background(), m.ID)
	if err != nil || len(atts) != 1 || atts[0].Class != string(retry.Accepted) || m.ProviderID == "" {
		t.Errorf("row %+v attempts %+v (%v)", m, atts, err)
	}
	// Nothing eligible: a second run claims nothing and returns at once.
	sum, err = drain.Run(context.Background(), config(s, sm.Provider()))
	if err != nil || sum.Claimed != 0 {
		t.Errorf("idle run: %+v, %v", sum, err)
	}
}

func TestFaultsNeverDeliverAKeyTwice(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent provider %v", idempotent), func(t *testing.T) {
			t.Parallel()
			s := setup(t, 300, nil)
			cfg := sim.DefaultConfig()
			cfg.Idempotent, cfg.Seed = idempotent, 7
			// Pair limits, not identity-wide 429s: a 429 holds the whole identity
			// back for its Retry-After (1 s), which would make this test crawl.
			cfg.Fault5xx, cfg.FaultPair, cfg.FaultDrop, cfg.FaultPermanent = 0.1, 0.1, 0.05, 0.02
			sm := sim.New(cfg)
			drainAll(t, s, config(s, sm.Provider()))

			delivered := map[string]int{}
			for _, d := range sm.Deliveries() {
				delivered[d.Key]++
				if delivered[d.Key] > 1 {
					t.Errorf("key %s delivered twice", d.Key)
				}
			}
			ms, err := s.MessageList(context.Background(), &store.ListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				switch m.State {
				case state.Sent:
					if delivered[m.Key] != 1 {
						t.Errorf("%s is sent but was delivered %d times", m.Key, delivered[m.Key])
					}
				case state.Unknown:
					if idempotent {
						t.Errorf("%s is unknown, but the provider dedupes by key: it should have been retried", m.Key)
					}
				case state.Failed:
					if delivered[m.Key] != 0 {
						t.Errorf("%s failed (%s) but reached the phone", m.Key, m.Reason)
					}
				default:
					t.Errorf("%s left in %s", m.Key, m.State)
				}
			}
			if got := countStates(t, s); !idempotent && got[state.Unknown] == 0 {
				t.Errorf("no row became unknown with 5%% dropped answers: %v", got)
			}
		})
	}
}

// identityRefuser stands in for a provider whose token was revoked.
type identityRefuser struct{ calls atomic.Int32 }

func (p *identityRefuser) Send(context.Context, *provider.Message) provider.Result {
	p.calls.Add(1)
	return provider.Result{Class: retry.Identity, HTTPStatus: 401, Code: "190", RawError: `{"error":{"code":190}}`}
}
func (p *identityRefuser) Idempotent() bool { return false }

func TestAnIdentityErrorPausesTheIdentityNotEveryRow(t *testing.T) {
	t.Parallel()
	s := setup(t, 20, nil)
	p := &identityRefuser{}
	cfg := config(s, p)
	cfg.Concurrency = 1
	sum, err := drain.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.calls.Load() != 1 || sum.Paused != 1 || sum.Failed != 0 {
		t.Errorf("calls %d, summary %+v: want one call, then the identity paused", p.calls.Load(), sum)
	}
	if got := countStates(t, s); got[state.Queued] != 20 {
		t.Errorf("states %v, want all 20 still queued", got)
	}
	ids, err := s.IdentityStates(context.Background())
	if err != nil || len(ids) != 1 || !ids[0].Paused || ids[0].Queued != 20 {
		t.Errorf("identities %+v (%v)", ids, err)
	}
}

func TestARetryPastTheDeadlineFailsAsExpired(t *testing.T) {
	t.Parallel()
	s := setup(t, 1, func(_ int, p *store.EnqueueParams) { p.ExpiresAt = time.Now().Add(2 * time.Second) })
	cfg := sim.DefaultConfig()
	cfg.Fault5xx = 1
	sm := sim.New(cfg)
	dc := config(s, sm.Provider())
	dc.Identities["sim"].Policy = retry.Policy{Base: time.Hour, Factor: 2, Cap: time.Hour, MaxAttempts: 8}
	dc.Rand = func() float64 { return 0.99 }
	if _, err := drain.Run(context.Background(), dc); err != nil {
		t.Fatal(err)
	}
	m, err := s.MessageGet(context.Background(), "", "k-0000")
	if err != nil || m.State != state.Failed || m.Reason != state.Expired || m.LastError == "" {
		t.Errorf("row %+v (%v), want failed(expired) with the provider's error kept", m, err)
	}
}

func TestStoppingFinishesInFlightCallsAndClaimsNoMore(t *testing.T) {
	t.Parallel()
	s := setup(t, 100, nil)
	cfg := sim.DefaultConfig()
	cfg.Latency = 200 * time.Millisecond
	sm := sim.New(cfg)
	dc := config(s, sm.Provider())
	dc.Follow, dc.Concurrency = true, 4
	ctx, cancel := context.WithCancel(context.Background())
	// Stop while calls are in flight (each takes 200 ms): once a row is
	// sending, not after a fixed delay a loaded machine may outrun.
	go func() {
		for ctx.Err() == nil {
			ms, err := s.MessageList(context.Background(), &store.ListParams{State: state.Sending, Limit: 1})
			if err == nil && len(ms) > 0 {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	sum, err := drain.Run(ctx, dc)
	if err != nil {
		t.Fatal(err)
	}
	got := countStates(t, s)
	if got[state.Sending] != 0 || sum.Claimed != sum.Sent || sum.Sent != got[state.Sent] || sum.Sent == 0 || got[state.Queued] == 0 {
		t.Errorf("after stop: summary %+v, states %v: want every claimed row sent, none left sending, the rest queued", sum, got)
	}
}

// scripted answers each call with the next result of its script.
type scripted struct {
	mu      sync.Mutex
	results []provider.Result
	calls   int
}

func (p *scripted) Send(context.Context, *provider.Message) provider.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.results[min(p.calls, len(p.results)-1)]
	p.calls++
	return r
}
func (p *scripted) Idempotent() bool { return true }

// TestRetryScheduleFollowsTheTable walks one row through a 429 with
// Retry-After and then 5xx answers until its attempts run out, checking
// each scheduled retry against the table's bounds: at least the stated
// delay for the 429, full jitter within [0, ceiling] for the 5xx, and
// failed(exhausted) at the last attempt.
func TestRetryScheduleFollowsTheTable(t *testing.T) {
	t.Parallel()
	s := setup(t, 1, nil)
	policy := retry.Policy{Base: 20 * time.Millisecond, Factor: 2, Cap: 50 * time.Millisecond, MaxAttempts: 4}
	p := &scripted{results: []provider.Result{
		{Class: retry.RateLimited, HTTPStatus: 429, RetryAfter: 300 * time.Millisecond, RawError: `{"error":{"code":"rate_limited"}}`},
		{Class: retry.Transient, HTTPStatus: 503, RawError: `{"error":{"code":"internal","retryable":true}}`},
	}}
	cfg := config(s, p)
	cfg.Identities["sim"].Policy = policy
	cfg.MaxMessages = 1 // one attempt per run, so each schedule can be read
	ctx := context.Background()
	for attempt := 1; attempt <= policy.MaxAttempts; attempt++ {
		before := time.Now()
		if _, err := drain.Run(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		m, err := s.MessageGet(ctx, "", "k-0000")
		if err != nil {
			t.Fatal(err)
		}
		if m.Attempts != attempt {
			t.Fatalf("after run %d the row has %d attempts", attempt, m.Attempts)
		}
		if attempt == policy.MaxAttempts {
			if m.State != state.Failed || m.Reason != state.Exhausted || !strings.Contains(m.LastError, "retryable") {
				t.Errorf("after the last attempt: %s(%s), last error %q; want failed(exhausted) with the provider's error", m.State, m.Reason, m.LastError)
			}
			break
		}
		if m.State != state.Queued {
			t.Fatalf("after attempt %d the row is %s, want queued for a retry", attempt, m.State)
		}
		lo, hi := before, after.Add(policy.Ceiling(attempt))
		if attempt == 1 {
			lo, hi = before.Add(300*time.Millisecond), after.Add(300*time.Millisecond) // Retry-After beats the backoff
		}
		if m.NextAttemptAt.Before(lo.Truncate(time.Microsecond)) || m.NextAttemptAt.After(hi) {
			t.Errorf("attempt %d scheduled the next at +%s, want within [+%s, +%s]", attempt,
				m.NextAttemptAt.Sub(before), lo.Sub(before), hi.Sub(before))
		}
		time.Sleep(time.Until(m.NextAttemptAt) + time.Millisecond)
	}
	atts, err := s.MessageAttempts(ctx, mustID(t, s))
	if err != nil || len(atts) != policy.MaxAttempts || atts[0].HTTPStatus != 429 || atts[1].Class != string(retry.Transient) {
		t.Errorf("attempts %+v (%v)", atts, err)
	}
}

func mustID(t *testing.T, s store.Store) string {
	t.Helper()
	m, err := s.MessageGet(context.Background(), "", "k-0000")
	if err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// TestAClosedWindowSwitchesTextToItsFallbackOrHoldsIt checks the hook for
// the customer-service window: free-form text to a recipient whose window
// is known to be closed is sent as the row's fallback template, or held
// (no call made) when it has none; templates go out as usual.
func TestAClosedWindowSwitchesTextToItsFallbackOrHoldsIt(t *testing.T) {
	t.Parallel()
	s := setup(t, 3, func(i int, p *store.EnqueueParams) {
		switch i {
		case 0:
			p.Payload = store.Payload{Text: "your order shipped", FallbackTemplate: "order_update_tpl"}
		case 1:
			p.Payload = store.Payload{Text: "are you there?"}
		}
	})
	sm := sim.New(sim.DefaultConfig())
	cfg := config(s, sm.Provider())
	cfg.WindowClosed = func(context.Context, string, string) bool { return true }
	sum, err := drain.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 2 || sum.Retried != 1 {
		t.Errorf("summary %+v, want 2 sent (fallback and template) and 1 held", sum)
	}
	ctx := context.Background()
	get := func(key string) (*store.Message, []store.HistoryEntry) {
		m, err := s.MessageGet(ctx, "", key)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.MessageHistory(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		return m, h
	}
	m, h := get("k-0000")
	if m.State != state.Sent || !strings.Contains(h[len(h)-1].Detail, "fallback template order_update_tpl") {
		t.Errorf("text with a fallback: %s, last history %+v", m.State, h[len(h)-1])
	}
	m, h = get("k-0001")
	if m.State != state.Queued || m.NextAttemptAt.Before(time.Now().Add(50*time.Minute)) ||
		!strings.Contains(h[len(h)-1].Detail, "held: customer-service window closed") {
		t.Errorf("text without a fallback: %s next %v, last history %+v", m.State, m.NextAttemptAt, h[len(h)-1])
	}
	if atts, _ := s.MessageAttempts(ctx, m.ID); len(atts) != 0 || m.Attempts != 0 {
		t.Errorf("a held row recorded %d provider calls and counts %d attempts; want none", len(atts), m.Attempts)
	}
	if n := len(sm.Deliveries()); n != 2 {
		t.Errorf("%d deliveries, want 2", n)
	}
}

// TestARefusalAfterALostAnswerLeavesTheRowUnknown: the first call's answer
// is lost, the row is retried with the same key, and the retry is refused
// for good. The refusal proves nothing about the first call, so the row is
// unknown (for a person), never failed (an invitation to resend).
func TestARefusalAfterALostAnswerLeavesTheRowUnknown(t *testing.T) {
	t.Parallel()
	s := setup(t, 1, nil)
	p := &scripted{results: []provider.Result{
		{Class: retry.Ambiguous, RawError: "read tcp: connection reset by peer"},
		{Class: retry.Permanent, HTTPStatus: 409, Code: "idempotency_key_reused", RawError: `{"error":{"code":"idempotency_key_reused"}}`},
	}}
	cfg := config(s, p)
	drainAll(t, s, cfg)
	m, err := s.MessageGet(context.Background(), "", "k-0000")
	if err != nil || m.State != state.Unknown || !m.MaybeSent {
		t.Errorf("row %+v (%v): want unknown and maybe_sent", m, err)
	}
}

// failingStore refuses every outcome write: a database that went away
// after the claims.
type failingStore struct{ store.Store }

func (failingStore) MessageTransitionMany(context.Context, []store.TransitionParams) ([]store.TransitionResult, error) {
	return nil, errors.New("disk I/O error")
}

// TestStoppingIsBoundedByGraceEvenWhenOutcomesCannotBeWritten: the drain
// retries outcome writes, but not past its grace period after a stop; it
// then reports the unrecorded outcomes and fails, and the rows stay in
// sending (visible), never back in queued.
func TestStoppingIsBoundedByGraceEvenWhenOutcomesCannotBeWritten(t *testing.T) {
	t.Parallel()
	s := setup(t, 8, nil)
	cfg := config(failingStore{s}, sim.New(sim.DefaultConfig()).Provider())
	cfg.Follow, cfg.Grace = true, 300*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	// Stop once all 8 are claimed (a rule, not a schedule: a loaded CI
	// machine may take longer than any fixed delay to claim them).
	go func() {
		for ctx.Err() == nil {
			ms, err := s.MessageList(context.Background(), &store.ListParams{State: state.Sending, Limit: 100})
			if err == nil && len(ms) == 8 {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	sum, err := drain.Run(ctx, cfg)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run took %s after a stop with a 300ms grace", took)
	}
	if err == nil || sum.Unrecorded != 8 {
		t.Errorf("summary %+v, err %v: want 8 unrecorded outcomes and an error", sum, err)
	}
	if got := countStates(t, s); got[state.Sending] != 8 {
		t.Errorf("states %v, want all 8 still sending under their lease", got)
	}
}

// TestARateLimitSlowsTheIdentityOrTheRecipientForEveryRow: a 429 with
// Retry-After holds back the identity's other rows too (every drain reads
// the deferred slot from the store), and a pair limit holds back only that
// recipient.
func TestARateLimitSlowsTheIdentityOrTheRecipientForEveryRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		recipientOnly bool
		wantSent      int
	}{
		{"an identity limit holds every row", false, 0},
		{"a pair limit holds that recipient only", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, 5, nil)
			p := &scripted{results: []provider.Result{
				{Class: retry.RateLimited, HTTPStatus: 429, RetryAfter: time.Hour, RecipientOnly: tc.recipientOnly},
				{Class: retry.Accepted, ProviderID: "msg_1"},
			}}
			cfg := config(s, p)
			cfg.Concurrency = 1
			cfg.MaxMessages = 1
			if _, err := drain.Run(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			cfg.MaxMessages = 0
			sum, err := drain.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Sent != tc.wantSent {
				t.Errorf("after the rate limit a drain sent %d rows, want %d", sum.Sent, tc.wantSent)
			}
		})
	}
}
