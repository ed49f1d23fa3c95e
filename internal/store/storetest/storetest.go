// Package storetest is the conformance suite every msgq store runs: the
// behaviour callers may rely on, tested against a real database.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Harness tells the suite how to get stores.
type Harness struct {
	// New returns a store over a fresh, empty, migrated database whose
	// clock is now (time.Now when nil). It is closed when t ends.
	New func(t *testing.T, now func() time.Time) store.Store
	// Reopen returns a second, independent handle (its own connections) on
	// the database behind s, closed when t ends.
	Reopen func(t *testing.T, s store.Store) store.Store
	// RawTx runs stmts (SQL both stores accept) in one transaction on the
	// database behind s and commits it, or rolls it back when !commit: a
	// writer other than the store's own code (the events' triggers must
	// see every one).
	RawTx func(t *testing.T, s store.Store, commit bool, stmts ...string)
}

// Clock is a settable clock for tests.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)

// Params returns valid enqueue parameters for key, for tests to adjust.
func Params(key string) store.EnqueueParams {
	return store.EnqueueParams{
		Key: key, To: "+15551234567", Channel: store.ChannelWhatsApp, Identity: "sim",
		Payload: store.Payload{Template: "order_update", Lang: "en", Params: []string{"Ada", "1001"}},
	}
}

// Exercise runs the whole suite.
func Exercise(t *testing.T, h Harness) {
	t.Run("Enqueue", func(t *testing.T) { t.Parallel(); testEnqueue(t, h) })
	t.Run("EnqueueMany", func(t *testing.T) { t.Parallel(); testEnqueueMany(t, h) })
	t.Run("EnqueueStatements", func(t *testing.T) { t.Parallel(); testEnqueueStatements(t, h) })
	t.Run("ChallengeStatements", func(t *testing.T) { t.Parallel(); testChallengeStatements(t, h) })
	t.Run("TickStatements", func(t *testing.T) { t.Parallel(); testTickStatements(t, h) })
	t.Run("Get", func(t *testing.T) { t.Parallel(); testGet(t, h) })
	t.Run("OptOuts", func(t *testing.T) { t.Parallel(); testOptOuts(t, h) })
	t.Run("Revive", func(t *testing.T) { t.Parallel(); testRevive(t, h) })
	t.Run("List", func(t *testing.T) { t.Parallel(); testList(t, h) })
	t.Run("Transition", func(t *testing.T) { t.Parallel(); testTransition(t, h) })
	t.Run("Migrate", func(t *testing.T) { t.Parallel(); testMigrate(t, h) })
	t.Run("Concurrency", func(t *testing.T) { t.Parallel(); testConcurrency(t, h) })
	t.Run("Claim", func(t *testing.T) { t.Parallel(); testClaim(t, h) })
	t.Run("Ops", func(t *testing.T) { t.Parallel(); testOps(t, h) })
	t.Run("Lease", func(t *testing.T) { t.Parallel(); testLease(t, h) })
	t.Run("Webhook", func(t *testing.T) { t.Parallel(); testWebhook(t, h) })
	t.Run("Vitals", func(t *testing.T) { t.Parallel(); testVitals(t, h) })
	t.Run("Clock", func(t *testing.T) { t.Parallel(); testClock(t, h) })
	t.Run("EvidenceIdentity", func(t *testing.T) { t.Parallel(); testEvidenceIdentity(t, h) })
	t.Run("Notices", func(t *testing.T) { t.Parallel(); testNotices(t, h) })
	t.Run("Email", func(t *testing.T) { t.Parallel(); testEmail(t, h) })
	t.Run("DailyRecipients", func(t *testing.T) { t.Parallel(); testDailyRecipients(t, h) })
	t.Run("Challenge", func(t *testing.T) { t.Parallel(); testChallenge(t, h) })
	t.Run("APIKeys", func(t *testing.T) { t.Parallel(); testAPIKeys(t, h) })
	t.Run("ProviderIDOwners", func(t *testing.T) { t.Parallel(); testProviderIDOwners(t, h) })
	t.Run("Notes", func(t *testing.T) { t.Parallel(); testNotes(t, h); testNotesRace(t, h) })
	t.Run("Events", func(t *testing.T) { t.Parallel(); testEvents(t, h) })
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

func testEnqueue(t *testing.T, h Harness) {
	ctx := context.Background()

	t.Run("a new key creates a queued row with its creation in history", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("order-1001-shipped")
		p.Purpose, p.TriggerRef, p.Lane = "shipping", "order:1001", store.LaneReply
		res := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		m := res.Message
		if res.Replayed {
			t.Error("a new key was reported as a replay")
		}
		if m.ID == "" || m.State != state.Queued || m.Tenant != store.DefaultTenant || m.Key != p.Key ||
			m.To != p.To || m.Purpose != "shipping" || m.TriggerRef != "order:1001" || m.Lane != store.LaneReply ||
			m.Attempts != 0 || m.BodyHash != p.BodyHash() {
			t.Errorf("new row = %+v", m)
		}
		want := t0.Truncate(store.Resolution)
		if !m.CreatedAt.Equal(want) || !m.UpdatedAt.Equal(want) || !m.NextAttemptAt.Equal(want) {
			t.Errorf("timestamps created=%v updated=%v next=%v, want all %v", m.CreatedAt, m.UpdatedAt, m.NextAttemptAt, want)
		}
		got := must[*store.Message](t)(s.MessageGet(ctx, "", m.ID))
		if got.Payload == nil || got.Payload.Template != "order_update" || len(got.Payload.Params) != 2 ||
			got.Payload.Params[1] != "1001" || !got.CreatedAt.Equal(want) || got.ExpiresAt != nil {
			t.Errorf("stored row = %+v payload %+v", got, got.Payload)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID))
		if len(hist) != 1 || hist[0].From != state.None || hist[0].To != state.Queued || !hist[0].Applied ||
			hist[0].Source != store.SourceSend || hist[0].Event != string(state.Enqueue) || !hist[0].At.Equal(want) {
			t.Errorf("history = %+v, want one enqueue entry", hist)
		}
	})

	t.Run("the same key and body is a replay that writes nothing", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("k1")
		first := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		clk.Advance(time.Minute)
		p.Purpose = "another purpose is not another body"
		again := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		if !again.Replayed || again.Message.ID != first.Message.ID {
			t.Fatalf("replay = %+v (replayed %v), want the first row %s", again.Message, again.Replayed, first.Message.ID)
		}
		got := must[*store.Message](t)(s.MessageGet(ctx, "", first.Message.ID))
		if !got.UpdatedAt.Equal(first.Message.UpdatedAt) || got.Purpose != "" {
			t.Errorf("replay changed the row: %+v", got)
		}
		if hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, got.ID)); len(hist) != 1 {
			t.Errorf("replay wrote history: %+v", hist)
		}
	})

	t.Run("the same key with another body is a conflict naming the existing row", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		p := Params("k1")
		first := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p))
		for name, change := range map[string]func(*store.EnqueueParams){
			"text":      func(p *store.EnqueueParams) { p.Payload = store.Payload{Text: "different"} },
			"recipient": func(p *store.EnqueueParams) { p.To = "+15551234568" },
			"identity":  func(p *store.EnqueueParams) { p.Identity = "other" },
			"channel":   func(p *store.EnqueueParams) { p.Channel = store.ChannelSMS },
			"params":    func(p *store.EnqueueParams) { p.Payload.Params = []string{"Ada", "1002"} },
		} {
			q := Params("k1")
			change(&q)
			_, err := s.MessageEnqueue(ctx, &q)
			var ce *store.ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) || ce.ExistingID != first.Message.ID || ce.Key != "k1" {
				t.Errorf("another %s: err = %v, want a conflict naming %s", name, err, first.Message.ID)
			}
		}
		list := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{}))
		if len(list) != 1 {
			t.Errorf("conflicts wrote rows: %d rows", len(list))
		}
	})

	t.Run("one key in two tenants is two rows", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		a, b := Params("k1"), Params("k1")
		b.Tenant = "acme"
		ra := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &a))
		rb := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &b))
		if ra.Message.ID == rb.Message.ID || rb.Replayed || rb.Message.Tenant != "acme" {
			t.Errorf("tenants share a key: %+v %+v", ra.Message, rb.Message)
		}
	})

	t.Run("invalid parameters are refused before anything is written", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		cases := map[string]func(*store.EnqueueParams){
			"empty key":              func(p *store.EnqueueParams) { p.Key = "" },
			"key with a space":       func(p *store.EnqueueParams) { p.Key = "a b" },
			"key of 65 characters":   func(p *store.EnqueueParams) { p.Key = fmt.Sprintf("%065d", 1) },
			"recipient not E.164":    func(p *store.EnqueueParams) { p.To = "5551234567" },
			"unknown channel":        func(p *store.EnqueueParams) { p.Channel = "pigeon" },
			"unknown lane":           func(p *store.EnqueueParams) { p.Lane = "fast" },
			"text and template":      func(p *store.EnqueueParams) { p.Payload.Text = "hi" },
			"no content":             func(p *store.EnqueueParams) { p.Payload = store.Payload{} },
			"expiry in the past":     func(p *store.EnqueueParams) { p.ExpiresAt = t0.Add(-time.Second) },
			"expiry before start":    func(p *store.EnqueueParams) { p.NotBefore, p.ExpiresAt = t0.Add(time.Hour), t0.Add(time.Minute) },
			"fallback for templates": func(p *store.EnqueueParams) { p.Payload.FallbackTemplate = "x" },
			"bad tenant":             func(p *store.EnqueueParams) { p.Tenant = "a/b" },
			"blank text":             func(p *store.EnqueueParams) { p.Payload = store.Payload{Text: "  \n "} },
		}
		for name, change := range cases {
			p := Params("k-" + fmt.Sprint(len(name)))
			change(&p)
			_, err := s.MessageEnqueue(ctx, &p)
			var ie *store.InvalidError
			if !errors.As(err, &ie) {
				t.Errorf("%s: err = %v, want *store.InvalidError", name, err)
			}
		}
		if list := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{})); len(list) != 0 {
			t.Errorf("invalid input wrote %d rows", len(list))
		}
	})

	t.Run("not_before and expires_at are kept", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("timed")
		p.NotBefore, p.ExpiresAt = t0.Add(time.Hour), t0.Add(2*time.Hour)
		m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		got := must[*store.Message](t)(s.MessageGet(ctx, "", m.ID))
		if !got.NextAttemptAt.Equal(p.NotBefore.Truncate(store.Resolution)) || got.ExpiresAt == nil ||
			!got.ExpiresAt.Equal(p.ExpiresAt.Truncate(store.Resolution)) {
			t.Errorf("next_attempt_at %v expires_at %v", got.NextAttemptAt, got.ExpiresAt)
		}
	})
}

func testEnqueueMany(t *testing.T, h Harness) {
	ctx := context.Background()

	t.Run("a batch reports each item in order and writes the good ones", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		pre := Params("existing")
		old := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &pre))
		conflicting := Params("existing")
		conflicting.Payload = store.Payload{Text: "other"}
		bad := Params("bad key")
		dupConflict := Params("dup")
		dupConflict.To = "+15551234599"
		batch := []store.EnqueueParams{Params("new-1"), Params("existing"), conflicting, bad, Params("dup"), Params("dup"), dupConflict, Params("new-2")}
		res := must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, batch))
		if len(res) != len(batch) {
			t.Fatalf("%d results for %d items", len(res), len(batch))
		}
		check := func(i int, replayed bool, errIs error) {
			t.Helper()
			r := res[i]
			switch {
			case errIs != nil:
				if !errors.Is(r.Err, errIs) && !(errIs == errInvalid && isInvalid(r.Err)) {
					t.Errorf("item %d: err = %v, want %v", i, r.Err, errIs)
				}
			case r.Err != nil:
				t.Errorf("item %d: unexpected err %v", i, r.Err)
			case r.Replayed != replayed || r.Message == nil || r.Message.Key != batch[i].Key:
				t.Errorf("item %d: replayed=%v message=%+v", i, r.Replayed, r.Message)
			}
		}
		check(0, false, nil)
		check(1, true, nil)
		check(2, false, store.ErrConflict)
		check(3, false, errInvalid)
		check(4, false, nil)
		check(5, true, nil)
		check(6, false, store.ErrConflict)
		check(7, false, nil)
		if res[1].Message.ID != old.Message.ID || res[5].Message.ID != res[4].Message.ID {
			t.Error("replays in a batch did not return the existing rows")
		}
		var ce *store.ConflictError
		if errors.As(res[6].Err, &ce) && ce.ExistingID != res[4].Message.ID {
			t.Errorf("in-batch conflict names %s, want %s", ce.ExistingID, res[4].Message.ID)
		}
		list := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{}))
		if len(list) != 4 {
			t.Errorf("%d rows after the batch, want 4 (existing, new-1, dup, new-2)", len(list))
		}
		for _, m := range list {
			if hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID)); len(hist) != 1 {
				t.Errorf("%s: %d history rows, want 1", m.Key, len(hist))
			}
		}
	})

	t.Run("a large batch meeting existing keys still sorts new rows, replays and conflicts", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		// Stores may write a large batch of new keys a faster way that
		// any existing key makes them abandon: the keys met here sort
		// last, so that way gets furthest before it must give up.
		pre := []store.EnqueueParams{Params("zz-replayed"), Params("zz-conflicting")}
		must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, pre))
		const n = 300
		batch := make([]store.EnqueueParams, 0, n+2)
		for i := range n {
			batch = append(batch, Params(fmt.Sprintf("fresh-%04d", i)))
		}
		other := Params("zz-conflicting")
		other.Payload = store.Payload{Text: "another body"}
		batch = append(batch, Params("zz-replayed"), other)
		res := must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, batch))
		for i := range n {
			if r := res[i]; r.Err != nil || r.Replayed {
				t.Fatalf("item %d: %+v", i, r)
			}
		}
		if !res[n].Replayed || res[n].Err != nil {
			t.Errorf("existing key, same body: %+v, want a replay", res[n])
		}
		if !errors.Is(res[n+1].Err, store.ErrConflict) {
			t.Errorf("existing key, other body: %v, want a conflict", res[n+1].Err)
		}
		if list := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{Limit: 10 * n})); len(list) != n+2 {
			t.Errorf("%d rows, want %d", len(list), n+2)
		}
	})

	t.Run("a batch larger than one statement is written whole", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		const n = 1500
		batch := make([]store.EnqueueParams, n)
		for i := range batch {
			batch[i] = Params(fmt.Sprintf("bulk-%05d", i))
		}
		res := must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, batch))
		ids := map[string]bool{}
		for i, r := range res {
			if r.Err != nil || r.Replayed || r.Message.Key != batch[i].Key {
				t.Fatalf("item %d: %+v", i, r)
			}
			ids[r.Message.ID] = true
		}
		if len(ids) != n {
			t.Errorf("%d distinct ids for %d rows", len(ids), n)
		}
		again := must[[]store.EnqueueResult](t)(s.MessageEnqueueMany(ctx, batch))
		for i, r := range again {
			if r.Err != nil || !r.Replayed || r.Message.ID != res[i].Message.ID {
				t.Fatalf("replayed item %d: %+v", i, r)
			}
		}
		if list := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{Limit: 10 * n})); len(list) != n {
			t.Errorf("%d rows, want %d", len(list), n)
		}
	})
}

var errInvalid = errors.New("invalid")

func isInvalid(err error) bool {
	var ie *store.InvalidError
	return errors.As(err, &ie)
}

func testGet(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.New(t, nil)
	p := Params("order-7")
	m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
	other := Params("order-7")
	other.Tenant = "acme"
	om := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &other)).Message

	for _, tc := range []struct{ name, tenant, ref, want string }{
		{"by id", "", m.ID, m.ID},
		{"by id in its own tenant", "acme", om.ID, om.ID},
		{"by key in the default tenant", "", "order-7", m.ID},
		{"by key in a named tenant", "acme", "order-7", om.ID},
	} {
		got, err := s.MessageGet(ctx, tc.tenant, tc.ref)
		if err != nil || got.ID != tc.want {
			t.Errorf("%s: got %v, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	for _, ref := range []string{"nope", "01ARZ3NDEKTSV4RRFFQ69G5FAV", ""} {
		if _, err := s.MessageGet(ctx, "", ref); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get %q: err = %v, want ErrNotFound", ref, err)
		}
	}
	if _, err := s.MessageGet(ctx, "other", "order-7"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a key from another tenant was found: %v", err)
	}
	if _, err := s.MessageGet(ctx, "acme", m.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an id from another tenant was found: %v", err)
	}
}

func testList(t *testing.T, h Harness) {
	ctx := context.Background()
	clk := NewClock(t0)
	s := h.New(t, clk.Now)
	mk := func(key, to, purpose string) *store.Message {
		p := Params(key)
		p.To, p.Purpose = to, purpose
		clk.Advance(time.Second)
		return must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
	}
	a := mk("order_1", "+15551230001", "shipping")
	b := mk("order_2", "+15551230002", "shipping")
	c := mk("order.3", "+15551230001", "marketing")
	d := mk("promo-1", "+15551230003", "marketing")
	e := mk("orderX", "+15551230003", "marketing")
	must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{
		ID: d.ID, From: state.Queued, Event: state.Event{Kind: state.Cancel}, Source: store.SourceOperator}))
	rp := Params("promo-1-r2")
	rp.To, rp.Purpose, rp.ResendOf = "+15551230003", "marketing", d.ID
	clk.Advance(time.Second)
	r := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &rp)).Message

	keys := func(ms []store.Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Key)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		p    store.ListParams
		want []string
	}{
		{"everything newest first", store.ListParams{}, []string{r.Key, e.Key, d.Key, c.Key, b.Key, a.Key}},
		{"by state", store.ListParams{State: state.Failed}, []string{d.Key}},
		{"by recipient", store.ListParams{To: "+15551230001"}, []string{c.Key, a.Key}},
		{"by purpose", store.ListParams{Purpose: "shipping"}, []string{b.Key, a.Key}},
		{"by key prefix", store.ListParams{KeyPrefix: "order"}, []string{e.Key, c.Key, b.Key, a.Key}},
		{"by key prefix with an underscore, taken literally", store.ListParams{KeyPrefix: "order_"}, []string{b.Key, a.Key}},
		{"by key prefix with a dot", store.ListParams{KeyPrefix: "order."}, []string{c.Key}},
		{"since a time", store.ListParams{Since: c.CreatedAt}, []string{r.Key, e.Key, d.Key, c.Key}},
		{"with a limit", store.ListParams{Limit: 2}, []string{r.Key, e.Key}},
		{"resends of a message", store.ListParams{ResendOf: d.ID}, []string{r.Key}},
		{"resends of a message never resent", store.ListParams{ResendOf: e.ID}, nil},
		{"in a tenant", store.ListParams{Tenant: "acme"}, nil},
		{"filters combined", store.ListParams{Purpose: "marketing", State: state.Queued, To: "+15551230003"}, []string{r.Key, e.Key}},
		{"the page before a row", store.ListParams{Before: d.ID, Limit: 2}, []string{c.Key, b.Key}},
		{"the page before a row, filtered", store.ListParams{Before: e.ID, KeyPrefix: "order"}, []string{c.Key, b.Key, a.Key}},
	} {
		got := keys(must[[]store.Message](t)(s.MessageList(ctx, &tc.p)))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		// MessageCount counts what MessageList would return without
		// its limit (with a bound, no further than it).
		noLimit := tc.p
		noLimit.Limit = 0
		all := len(must[[]store.Message](t)(s.MessageList(ctx, &noLimit)))
		if n := must[int](t)(s.MessageCount(ctx, &tc.p, 0)); n != all {
			t.Errorf("%s: count %d, want %d", tc.name, n, all)
		}
		if n := must[int](t)(s.MessageCount(ctx, &tc.p, 1)); n != min(all, 1) {
			t.Errorf("%s: count up to 1: %d, want %d", tc.name, n, min(all, 1))
		}
	}
	if _, err := s.MessageList(ctx, &store.ListParams{State: "bogus"}); !isInvalid(err) {
		t.Errorf("an unknown state filter: err = %v, want *store.InvalidError", err)
	}
	if _, err := s.MessageCount(ctx, &store.ListParams{State: "bogus"}, 0); !isInvalid(err) {
		t.Errorf("count with an unknown state filter: err = %v, want *store.InvalidError", err)
	}
}

func testTransition(t *testing.T, h Harness) {
	ctx := context.Background()

	t.Run("a transition writes the row, a history entry and an attempt together", func(t *testing.T) {
		t.Parallel()
		clk := NewClock(t0)
		s := h.New(t, clk.Now)
		p := Params("k")
		m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		clk.Advance(time.Minute)
		att := &store.Attempt{Number: 1, StartedAt: t0, FinishedAt: t0.Add(time.Second), Class: "permanent",
			HTTPStatus: 400, ProviderCode: "131026", RawError: `{"error":{"code":131026}}`, Latency: 1500 * time.Millisecond}
		got := must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{
			ID: m.ID, From: state.Queued, Event: state.Event{Kind: state.Evidence, Status: state.Failed},
			Source: store.SourceWebhook, Detail: "status webhook", LastError: att.RawError, Attempt: att}))
		if got.State != state.Failed || got.Reason != state.Permanent || got.LastError != att.RawError ||
			!got.UpdatedAt.Equal(clk.Now().Truncate(store.Resolution)) {
			t.Errorf("row after transition: %+v", got)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID))
		if len(hist) != 2 || hist[1].From != state.Queued || hist[1].To != state.Failed || hist[1].Reason != state.Permanent ||
			hist[1].Source != store.SourceWebhook || hist[1].Detail != "status webhook" || !hist[1].Applied {
			t.Errorf("history: %+v", hist)
		}
		atts := must[[]store.Attempt](t)(s.MessageAttempts(ctx, m.ID))
		if len(atts) != 1 || atts[0].RawError != att.RawError || atts[0].HTTPStatus != 400 || atts[0].ProviderCode != "131026" ||
			atts[0].Latency != att.Latency || !atts[0].StartedAt.Equal(t0.Truncate(store.Resolution)) {
			t.Errorf("attempts: %+v", atts)
		}
	})

	t.Run("stale evidence is recorded in history and not applied", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		p := Params("k")
		m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		ev := func(from, st state.State) *store.Message {
			return must[*store.Message](t)(s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: from,
				Event: state.Event{Kind: state.Evidence, Status: st}, Source: store.SourceWebhook}))
		}
		ev(state.Queued, state.Delivered)
		if got := ev(state.Delivered, state.Failed); got.State != state.Delivered {
			t.Errorf("a failure after delivery was applied: %s", got.State)
		}
		if got := ev(state.Delivered, state.Sent); got.State != state.Delivered {
			t.Errorf("a late sent was applied: %s", got.State)
		}
		hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID))
		if len(hist) != 4 || !hist[1].Applied || hist[2].Applied || hist[3].Applied || hist[2].Event != "evidence(failed)" {
			t.Errorf("history: %+v", hist)
		}
	})

	t.Run("a writer that read an old state loses cleanly", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		p := Params("k")
		m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		const writers = 16
		var won, stale atomic.Int32
		var wg sync.WaitGroup
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Queued,
					Event: state.Event{Kind: state.Cancel}, Source: store.SourceOperator})
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, store.ErrStale):
					stale.Add(1)
				default:
					t.Errorf("cancel: %v", err)
				}
			}()
		}
		wg.Wait()
		if won.Load() != 1 || stale.Load() != writers-1 {
			t.Errorf("%d won and %d were stale, want 1 and %d", won.Load(), stale.Load(), writers-1)
		}
		if hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID)); len(hist) != 2 {
			t.Errorf("%d history rows, want 2", len(hist))
		}
	})

	t.Run("a batch of transitions applies the good ones and reports each bad one", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		var ids []string
		for i := range 3 {
			p := Params(fmt.Sprintf("k%d", i))
			ids = append(ids, must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message.ID)
		}
		cancel := state.Event{Kind: state.Cancel}
		res := must[[]store.TransitionResult](t)(s.MessageTransitionMany(ctx, []store.TransitionParams{
			{ID: ids[0], From: state.Queued, Event: cancel, Source: store.SourceOperator},
			{ID: ids[1], From: state.Sending, Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain},
			{ID: "missing", From: state.Queued, Event: cancel, Source: store.SourceOperator},
			{ID: ids[2], From: state.Queued, Event: state.Event{Kind: state.Accept}, Source: store.SourceOperator},
			{ID: ids[0], From: state.Queued, Event: cancel, Source: store.SourceOperator},
		}))
		if res[0].Err != nil || res[0].State != state.Failed {
			t.Errorf("good item: %+v", res[0])
		}
		for i, want := range []error{nil, store.ErrStale, store.ErrNotFound, state.ErrRefused, store.ErrStale} {
			if want != nil && !errors.Is(res[i].Err, want) {
				t.Errorf("item %d: err = %v, want %v", i, res[i].Err, want)
			}
		}
		for i, id := range ids {
			hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, id))
			if want := map[int]int{0: 2, 1: 1, 2: 1}[i]; len(hist) != want {
				t.Errorf("row %d has %d history entries, want %d", i, len(hist), want)
			}
		}
	})

	t.Run("refusals and missing rows are typed errors", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		p := Params("k")
		m := must[*store.EnqueueResult](t)(s.MessageEnqueue(ctx, &p)).Message
		_, err := s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Queued, Event: state.Event{Kind: state.Accept}})
		if !errors.Is(err, state.ErrRefused) {
			t.Errorf("accept on a queued row: err = %v, want a refusal", err)
		}
		_, err = s.MessageTransition(ctx, &store.TransitionParams{ID: "missing", From: state.Queued, Event: state.Event{Kind: state.Cancel}})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("missing row: err = %v, want ErrNotFound", err)
		}
		_, err = s.MessageTransition(ctx, &store.TransitionParams{ID: m.ID, From: state.Queued, Event: state.Event{Kind: state.Cancel}, LeaseOwner: "drain-1"})
		if !errors.Is(err, store.ErrStale) {
			t.Errorf("a lease the caller does not hold: err = %v, want ErrStale", err)
		}
		if got := must[*store.Message](t)(s.MessageGet(ctx, "", m.ID)); got.State != state.Queued {
			t.Errorf("a refused transition changed the row to %s", got.State)
		}
		if hist := must[[]store.HistoryEntry](t)(s.MessageHistory(ctx, m.ID)); len(hist) != 1 {
			t.Errorf("refusals wrote history: %+v", hist)
		}
	})
}

func testMigrate(t *testing.T, h Harness) {
	s := h.New(t, nil)
	applied, err := s.Migrate(context.Background())
	if err != nil || len(applied) != 0 {
		t.Errorf("migrating a current database applied %v, err %v", applied, err)
	}
}

func testConcurrency(t *testing.T, h Harness) {
	ctx := context.Background()
	t.Run("large batches and single sends at once on one handle all land", func(t *testing.T) {
		t.Parallel()
		s := h.New(t, nil)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		const batches, batchSize, singles = 4, 600, 40
		for b := range batches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ps := make([]store.EnqueueParams, batchSize)
				for i := range ps {
					ps[i] = Params(fmt.Sprintf("batch-%d-%d", b, i))
				}
				res, err := s.MessageEnqueueMany(ctx, ps)
				if err != nil {
					t.Errorf("batch %d: %v", b, err)
					return
				}
				for i, r := range res {
					if r.Err != nil || r.Replayed {
						t.Errorf("batch %d item %d: %+v", b, i, r)
					}
				}
			}()
		}
		for i := range singles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := Params(fmt.Sprintf("single-%d", i))
				if _, err := s.MessageEnqueue(ctx, &p); err != nil {
					t.Errorf("single %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		list := must[[]store.Message](t)(s.MessageList(ctx, &store.ListParams{Limit: 10000}))
		if len(list) != batches*batchSize+singles {
			t.Errorf("%d rows, want %d", len(list), batches*batchSize+singles)
		}
	})

	t.Run("32 goroutines on 4 handles enqueue one key: one row, the rest replays", func(t *testing.T) {
		t.Parallel()
		first := h.New(t, nil)
		handles := []store.Store{first, h.Reopen(t, first), h.Reopen(t, first), h.Reopen(t, first)}
		const n = 32
		var created atomic.Int32
		ids := make([]string, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p := Params("race-key")
				r, err := handles[i%len(handles)].MessageEnqueue(ctx, &p)
				if err != nil {
					t.Errorf("goroutine %d: %v", i, err)
					return
				}
				if !r.Replayed {
					created.Add(1)
				}
				ids[i] = r.Message.ID
			}()
		}
		close(start)
		wg.Wait()
		if created.Load() != 1 {
			t.Errorf("%d goroutines created the row, want exactly 1", created.Load())
		}
		for i, id := range ids {
			if id != ids[0] {
				t.Errorf("goroutine %d got row %s, goroutine 0 got %s", i, id, ids[0])
			}
		}
		if list := must[[]store.Message](t)(first.MessageList(ctx, &store.ListParams{})); len(list) != 1 {
			t.Errorf("%d rows, want 1", len(list))
		}
	})
}
