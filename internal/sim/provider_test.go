package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
)

func inMsg(key, ref, text string) *provider.Message {
	return &provider.Message{ID: ref, Key: key, To: "+15551234567", Channel: "sms", Payload: store.Payload{Text: text}}
}

func TestProviderAcceptReplayConflict(t *testing.T) {
	t.Parallel()
	s := sim.New(cfgWith(nil))
	p := s.Provider()
	if !p.Idempotent() {
		t.Fatal("DefaultConfig is idempotent")
	}
	ctx := t.Context()
	got := p.Send(ctx, inMsg("k1", "r1", "hi"))
	if want := (provider.Result{Class: retry.Accepted, ProviderID: "msg_1", HTTPStatus: 202}); got != want {
		t.Fatalf("first: %+v", got)
	}
	got = p.Send(ctx, inMsg("k1", "r1", "hi"))
	if want := (provider.Result{Class: retry.Accepted, ProviderID: "msg_1", HTTPStatus: 200, Replayed: true}); got != want {
		t.Fatalf("replay: %+v", got)
	}
	got = p.Send(ctx, inMsg("k1", "r1", "another"))
	if got.Class != retry.Permanent || got.HTTPStatus != 409 || got.Code != "idempotency_key_reused" || got.RawError == "" {
		t.Fatalf("reused key: %+v", got)
	}
	tm := inMsg("k2", "r2", "")
	tm.Payload = store.Payload{Template: "order_update", Lang: "en", Params: []string{"Ada"}}
	if got := p.Send(ctx, tm); got.Class != retry.Accepted || got.Replayed {
		t.Fatalf("template: %+v", got)
	}
	tm.Payload.Params[0] = "Bob" // the provider kept its own copy of the body
	if got := p.Send(ctx, tm); got.Code != "idempotency_key_reused" {
		t.Fatalf("changed params: %+v", got)
	}
	if got := p.Send(ctx, &provider.Message{Key: "k3", Payload: store.Payload{Text: "hi"}}); got.Class != retry.Permanent ||
		got.Code != "invalid_request" || got.HTTPStatus != 400 {
		t.Fatalf("no recipient: %+v", got)
	}
	want := []sim.Delivery{
		{Key: "k1", Ref: "r1", To: "+15551234567", At: fixedNow, ID: "msg_1", API: "sim"},
		{Key: "k2", Ref: "r2", To: "+15551234567", At: fixedNow, ID: "msg_2", API: "sim"},
	}
	if ds := s.Deliveries(); !reflect.DeepEqual(ds, want) {
		t.Fatalf("deliveries %+v", ds)
	}

	ni := sim.New(cfgWith(func(c *sim.Config) { c.Idempotent = false })).Provider()
	if ni.Idempotent() {
		t.Fatal("Idempotent() with Idempotent false")
	}
	a, b := ni.Send(ctx, inMsg("k1", "r1", "hi")), ni.Send(ctx, inMsg("k1", "r1", "hi"))
	if a.Class != retry.Accepted || b.Class != retry.Accepted || b.Replayed || a.ProviderID == b.ProviderID {
		t.Fatalf("not idempotent: %+v, %+v", a, b)
	}
}

func TestProviderFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		set       func(*sim.Config)
		class     retry.Class
		status    int
		code      string
		after     time.Duration
		delivered bool
	}{
		{"429", func(c *sim.Config) { c.Fault429 = 1 }, retry.RateLimited, 429, "rate_limited", time.Second, false},
		{"5xx", func(c *sim.Config) { c.Fault5xx = 1 }, retry.Transient, 500, "internal", 0, false},
		{"permanent", func(c *sim.Config) { c.FaultPermanent = 1 }, retry.Permanent, 422, "invalid_recipient", 0, false},
		{"pair", func(c *sim.Config) { c.FaultPair = 1 }, retry.RateLimited, 429, "pair_rate_limited", time.Second, false},
		{"drop", func(c *sim.Config) { c.FaultDrop = 1 }, retry.Ambiguous, 0, "", 0, true},
		// SlowDelay is not waited for in-process: the answer is lost at once.
		{"slow", func(c *sim.Config) { c.FaultSlow, c.SlowDelay = 1, time.Hour }, retry.Ambiguous, 0, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := sim.New(cfgWith(tc.set))
			start := time.Now()
			r := s.Provider().Send(t.Context(), inMsg("k1", "r1", "hi"))
			if time.Since(start) > 5*time.Second {
				t.Fatal("Send waited")
			}
			if r.Class != tc.class || r.HTTPStatus != tc.status || r.Code != tc.code || r.RetryAfter != tc.after ||
				r.ProviderID != "" || r.RawError == "" {
				t.Fatalf("%+v", r)
			}
			if tc.status != 0 {
				var body struct {
					Error struct{ Code string } `json:"error"`
				}
				if err := json.Unmarshal([]byte(r.RawError), &body); err != nil || body.Error.Code != tc.code {
					t.Fatalf("RawError %q is not the http API's body", r.RawError)
				}
			}
			if got := s.DeliveryCount() == 1; got != tc.delivered {
				t.Fatalf("delivered %v, want %v", got, tc.delivered)
			}
		})
	}
}

// TestProviderAmbiguousThenReplay: after a drop the key is remembered, so
// the retry an idempotent provider allows is a replay, not a second delivery.
func TestProviderAmbiguousThenReplay(t *testing.T) {
	t.Parallel()
	s := sim.New(cfgWith(func(c *sim.Config) { c.FaultDrop, c.Seed = 0.5, 3 }))
	p := s.Provider()
	first := p.Send(t.Context(), inMsg("k1", "r1", "hi"))
	if first.Class != retry.Ambiguous {
		t.Fatalf("seed 3 no longer drops the first call: %+v", first)
	}
	for range 64 {
		r := p.Send(t.Context(), inMsg("k1", "r1", "hi"))
		if r.Class == retry.Ambiguous {
			continue
		}
		if r.Class != retry.Accepted || !r.Replayed {
			t.Fatalf("retry: %+v", r)
		}
		if ds := s.Deliveries(); len(ds) != 1 || ds[0].ID != r.ProviderID {
			t.Fatalf("deliveries %+v, result %+v", ds, r)
		}
		return
	}
	t.Fatal("every call dropped")
}

func TestProviderContext(t *testing.T) {
	t.Parallel()
	s := sim.New(cfgWith(func(c *sim.Config) { c.Latency = time.Hour }))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if r := s.Provider().Send(ctx, inMsg("k1", "r1", "hi")); r.Class != retry.Ambiguous {
		t.Fatalf("deadline during latency: %+v", r)
	}
	if r := s.Provider().Send(ctx, inMsg("k2", "r2", "hi")); r.Class != retry.Transient {
		t.Fatalf("context already done: %+v", r)
	}
	if n := s.DeliveryCount(); n != 0 {
		t.Fatalf("%d deliveries", n)
	}
	s = sim.New(cfgWith(func(c *sim.Config) { c.Latency = 30 * time.Millisecond }))
	start := time.Now()
	if r := s.Provider().Send(t.Context(), inMsg("k1", "r1", "hi")); r.Class != retry.Accepted || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("latency: %+v after %v", r, time.Since(start))
	}
}

// mixed has every fault; stream is the request sequence the seed tests use:
// 20 keys reused, some with a changed body.
func mixed(seed uint64, slow float64) sim.Config {
	return cfgWith(func(c *sim.Config) {
		c.Seed = seed
		c.Fault429, c.Fault5xx, c.FaultPermanent, c.FaultPair, c.FaultDrop, c.FaultSlow = 0.1, 0.1, 0.1, 0.1, 0.1, slow
	})
}

func stream(i int) (key, ref, text string) {
	key = "k" + strconv.Itoa(i%20)
	text = "hi"
	if i%9 == 0 {
		text = "changed"
	}
	return key, "ref-" + key, text
}

// label names a result the way httpLabel names an HTTP answer.
func label(r provider.Result) string {
	switch {
	case r.Class == retry.Ambiguous:
		return "lost"
	case r.Replayed:
		return "replayed"
	case r.Class == retry.Accepted:
		return "accepted"
	}
	return r.Code
}

func httpLabel(t *testing.T, r *reply, err error) string {
	switch {
	case err != nil:
		return "lost"
	case r.status == 202:
		return "accepted"
	case r.status == 200 && r.header.Get("Idempotent-Replayed") == "true":
		return "replayed"
	}
	return decodeHTTPErr(t, r.body).Error.Code
}

func run(s *sim.Sim, n int) []string {
	var out []string
	p := s.Provider()
	for i := range n {
		key, ref, text := stream(i)
		out = append(out, label(p.Send(context.Background(), inMsg(key, ref, text))))
	}
	return out
}

// TestSeedReproducible: one seed, one sequence of outcomes; another seed,
// another sequence; and every outcome occurs.
func TestSeedReproducible(t *testing.T) {
	t.Parallel()
	a, b := run(sim.New(mixed(42, 0.1)), 300), run(sim.New(mixed(42, 0.1)), 300)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 twice:\n%v\n%v", a, b)
	}
	if c := run(sim.New(mixed(43, 0.1)), 300); reflect.DeepEqual(a, c) {
		t.Fatal("seeds 42 and 43 gave the same sequence")
	}
	seen := map[string]int{}
	for _, l := range a {
		seen[l]++
	}
	for _, l := range []string{"accepted", "replayed", "lost", "rate_limited", "internal", "invalid_recipient",
		"pair_rate_limited", "idempotency_key_reused"} {
		if seen[l] == 0 {
			t.Errorf("no %s in %v", l, seen)
		}
	}
}

// TestProviderMatchesHTTP: the same seed and the same requests give the same
// outcomes and the same delivery log in-process and over HTTP.
func TestProviderMatchesHTTP(t *testing.T) {
	t.Parallel()
	const n = 200
	inproc := sim.New(mixed(7, 0))
	want := run(inproc, n)

	s, srv := serve(t, mixed(7, 0))
	c := freshClient(10 * time.Second)
	var got []string
	for i := range n {
		key, ref, text := stream(i)
		r, err := post(c, srv.URL+"/v1/messages", "tok", key, httpMsg(ref, "+15551234567", text))
		got = append(got, httpLabel(t, r, err))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("http:\n%v\nin-process:\n%v", got, want)
	}
	hd, id := s.Deliveries(), inproc.Deliveries()
	if len(hd) != len(id) || len(hd) == 0 {
		t.Fatalf("%d deliveries over HTTP, %d in-process", len(hd), len(id))
	}
	for i := range hd {
		if hd[i].API != "http" || id[i].API != "sim" {
			t.Fatalf("apis %q, %q", hd[i].API, id[i].API)
		}
		hd[i].API, id[i].API = "", ""
		// The http body has a channel "sms" and so does inMsg: same bodies.
		if hd[i] != id[i] {
			t.Fatalf("delivery %d: http %+v, in-process %+v", i, hd[i], id[i])
		}
	}
}

// TestProviderConcurrent: 64 goroutines, distinct keys and one shared key,
// with faults: every key is delivered at most once, and every key whose
// call was accepted, replayed or lost is delivered exactly once.
func TestProviderConcurrent(t *testing.T) {
	t.Parallel()
	s := sim.New(cfgWith(func(c *sim.Config) {
		c.Seed, c.Fault429, c.Fault5xx, c.FaultDrop = 9, 0.1, 0.1, 0.1
	}))
	p := s.Provider()
	const workers, each = 64, 200
	var wg sync.WaitGroup
	var sharedOK atomic.Int64
	var mu sync.Mutex
	through := map[string]bool{} // keys some call of which got through
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				if i%50 == 0 {
					key = "shared"
				}
				r := p.Send(context.Background(), inMsg(key, "ref-"+key, "hi"))
				if r.Class == retry.Accepted || r.Class == retry.Ambiguous {
					if key == "shared" && r.Class == retry.Accepted && !r.Replayed {
						sharedOK.Add(1)
					}
					mu.Lock()
					through[key] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	ds := s.Deliveries()
	checkOnce(t, ds, len(through))
	for _, d := range ds {
		if !through[d.Key] {
			t.Fatalf("delivered %q, which no call got through with", d.Key)
		}
	}
	if n := sharedOK.Load(); n > 1 {
		t.Fatalf("the shared key was accepted as new %d times", n)
	}
}

// BenchmarkProviderSend is the in-process provider with no faults: the
// floor under any drain benchmark.
func BenchmarkProviderSend(b *testing.B) {
	s := sim.New(sim.DefaultConfig())
	p := s.Provider()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "k" + strconv.FormatInt(n.Add(1), 10)
			if r := p.Send(context.Background(), inMsg(key, key, "hi")); r.Class != retry.Accepted {
				b.Fatal(r)
			}
		}
	})
}
