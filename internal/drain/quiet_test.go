package drain_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/quiet"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/store/storetest"
)

// fakeClock is a settable clock shared by the store and the drain.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func berlinPolicy(t *testing.T) quiet.Policy {
	t.Helper()
	w, err := quiet.Parse("21:00-08:00")
	if err != nil {
		t.Fatal(err)
	}
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return quiet.Policy{Window: &w, Zone: loc, ExemptLanes: []string{store.LaneReply}}
}

func quietStore(t *testing.T, clk *fakeClock, ps ...store.EnqueueParams) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range ps {
		if _, err := s.MessageEnqueue(context.Background(), &ps[i]); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestARowFoundInQuietHoursIsGivenBackUntilTheirEnd: the drain's last
// guard. A bulk row to a German number claimed at 22:00 Berlin time goes
// back to queued, due at 08:00, with no call, no attempt counted, and a
// history note; the reply lane (exempt) goes at once, and so does a row
// whose own override is off. At 08:00 the held row goes.
func TestARowFoundInQuietHoursIsGivenBackUntilTheirEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)} // 22:00 CET
	morning := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)             // 08:00 CET
	bulk := storetest.Params("bulk-1")
	bulk.To = "+4930123456"
	reply := storetest.Params("reply-1")
	reply.To, reply.Lane = "+4930123457", store.LaneReply
	off := storetest.Params("off-1")
	off.To, off.Payload.QuietHours = "+4930123458", quiet.Off
	s := quietStore(t, clk, bulk, reply, off)
	sm := sim.New(sim.DefaultConfig())
	defer sm.Close()
	cfg := config(s, sm.Provider())
	cfg.Identities["sim"].Quiet = berlinPolicy(t)
	cfg.Now = clk.Now
	sum, err := drain.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 2 || sm.DeliveryCount() != 2 {
		t.Errorf("at 22:00: summary %+v, %d deliveries; want the reply and the override-off rows sent", sum, sm.DeliveryCount())
	}
	for _, d := range sm.Deliveries() {
		if d.Key == "bulk-1" {
			t.Errorf("the bulk row went out in quiet hours")
		}
	}
	m, err := s.MessageGet(ctx, "", "bulk-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.State != state.Queued || m.Attempts != 0 || !m.NextAttemptAt.Equal(morning) || !strings.HasPrefix(m.LastError, drain.QuietHeldError) {
		t.Errorf("held row: state %s attempts %d next %s last_error %q; want queued, 0 attempts, due %s",
			m.State, m.Attempts, m.NextAttemptAt.UTC(), m.LastError, morning)
	}
	if atts, _ := s.MessageAttempts(ctx, m.ID); len(atts) != 0 {
		t.Errorf("held row has attempts %+v", atts)
	}
	hist, _ := s.MessageHistory(ctx, m.ID)
	if h := hist[len(hist)-1]; h.To != state.Queued || !strings.Contains(h.Detail, "quiet hours 21:00-08:00 (Europe/Berlin)") {
		t.Errorf("last history %+v, want the quiet-hours note", h)
	}
	// Nothing is due until 08:00: a drain at 07:59 claims nothing.
	clk.Set(morning.Add(-time.Minute))
	if sum, err := drain.Run(ctx, cfg); err != nil || sum.Claimed != 0 {
		t.Errorf("at 07:59: %+v, %v; want nothing claimed", sum, err)
	}
	clk.Set(morning)
	if sum, err := drain.Run(ctx, cfg); err != nil || sum.Sent != 1 {
		t.Errorf("at 08:00: %+v, %v; want the held row sent", sum, err)
	}
	if sm.DeliveryCount() != 3 {
		t.Errorf("%d deliveries, want 3", sm.DeliveryCount())
	}
}

// slowFail fails its first call as transient after moving the clock on,
// as a call that took long; later calls go through.
type slowFail struct {
	provider.Provider
	clk   *fakeClock
	to    time.Time
	calls int
}

func (p *slowFail) Send(ctx context.Context, m *provider.Message) provider.Result {
	p.calls++
	if p.calls == 1 {
		p.clk.Set(p.to)
		return provider.Result{Class: retry.Transient, HTTPStatus: 503, RawError: "try again"}
	}
	return p.Provider.Send(ctx, m)
}

// TestARetryDueInQuietHoursWaitsForTheirEnd: a call made at 20:59:59
// fails transiently at 21:00:05; its retry, due within milliseconds, is
// scheduled for 08:00 instead.
func TestARetryDueInQuietHoursWaitsForTheirEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 12, 2, 19, 59, 59, 0, time.UTC)}
	morning := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	p := storetest.Params("late-1")
	p.To = "+4930123456"
	s := quietStore(t, clk, p)
	sm := sim.New(sim.DefaultConfig())
	defer sm.Close()
	prov := &slowFail{Provider: sm.Provider(), clk: clk, to: time.Date(2026, 12, 2, 20, 0, 5, 0, time.UTC)}
	cfg := config(s, prov)
	cfg.Concurrency = 1
	cfg.Identities["sim"].Quiet = berlinPolicy(t)
	cfg.Now = clk.Now
	if _, err := drain.Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	m, _ := s.MessageGet(ctx, "", "late-1")
	if m.State != state.Queued || m.Attempts != 1 || !m.NextAttemptAt.Equal(morning) || sm.DeliveryCount() != 0 {
		t.Errorf("after the failed call: state %s attempts %d next %s, %d deliveries; want queued, due %s",
			m.State, m.Attempts, m.NextAttemptAt.UTC(), sm.DeliveryCount(), morning)
	}
	hist, _ := s.MessageHistory(ctx, m.ID)
	if h := hist[len(hist)-1]; !strings.Contains(h.Detail, "the retry falls in quiet hours") {
		t.Errorf("last history %+v, want the quiet-hours note", h)
	}
	clk.Set(morning)
	if sum, err := drain.Run(ctx, cfg); err != nil || sum.Sent != 1 || sm.DeliveryCount() != 1 {
		t.Errorf("at 08:00: %+v, %v, %d deliveries", sum, err, sm.DeliveryCount())
	}
}
