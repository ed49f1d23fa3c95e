package sim_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/sim"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		f    func(*sim.Config)
		want string // "" for valid
	}{
		{"default", nil, ""},
		{"all faults adding to one", func(c *sim.Config) {
			c.Fault429, c.Fault5xx, c.FaultPermanent, c.FaultPair, c.FaultDrop, c.FaultSlow = 0.1, 0.2, 0.3, 0.1, 0.1, 0.2
		}, ""},
		{"one certain fault", func(c *sim.Config) { c.FaultDrop = 1 }, ""},
		{"above one", func(c *sim.Config) { c.Fault429 = 2 }, "fault-429 must be a probability between 0 and 1 (got 2)"},
		{"negative", func(c *sim.Config) { c.FaultDrop = -0.1 }, "fault-drop must be a probability between 0 and 1 (got -0.1)"},
		{"NaN", func(c *sim.Config) { c.FaultSlow = nanValue() }, "fault-slow must be a probability"},
		{"sum above one", func(c *sim.Config) { c.Fault5xx, c.FaultPair = 0.6, 0.5 }, "add up to 1.1"},
		{"negative latency", func(c *sim.Config) { c.Latency = -time.Second }, "latency must not be negative"},
		{"negative slow delay", func(c *sim.Config) { c.SlowDelay = -time.Second }, "slow-delay must not be negative"},
	} {
		err := cfgWith(tc.f).Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid config")
		}
	}()
	sim.New(cfgWith(func(c *sim.Config) { c.Fault429 = 2 }))
}

func nanValue() float64 { z := 0.0; return z / z }

func TestHTTPAccepted(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(nil))
	r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("01REF", "+15551234567", "hi"))
	if r.status != http.StatusAccepted || string(r.body) != `{"id":"msg_1","status":"accepted"}` {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Error("a new message says it was replayed")
	}
	want := []sim.Delivery{{Key: "k1", Ref: "01REF", To: "+15551234567", At: fixedNow, ID: "msg_1", API: "http"}}
	if got := deliveries(t, srv.URL); !reflect.DeepEqual(got, want) {
		t.Fatalf("deliveries %+v, want %+v", got, want)
	}

	// A template body and no key is accepted too, as a new delivery.
	tmpl := `{"ref":"r2","to":"+15551234567","channel":"whatsapp","template":{"name":"order_update","lang":"en","params":["Ada"]}}`
	if r := mustPost(t, srv.URL+"/v1/messages", "", tmpl); r.status != http.StatusAccepted {
		t.Fatalf("template: %d %s", r.status, r.body)
	}
	if r := mustPost(t, srv.URL+"/v1/messages", "", tmpl); r.status != http.StatusAccepted {
		t.Fatalf("template again without a key: %d %s", r.status, r.body)
	}
	if n := len(deliveries(t, srv.URL)); n != 3 {
		t.Fatalf("%d deliveries, want 3 (no key, no dedupe)", n)
	}

	// Look-up.
	get := func(id string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/messages/"+id, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("msg_1"); code != 200 || body != `{"id":"msg_1","status":"accepted"}` {
		t.Errorf("look-up msg_1: %d %s", code, body)
	}
	if code, body := get("msg_99"); code != 404 || !strings.Contains(body, `"not_found"`) {
		t.Errorf("look-up msg_99: %d %s", code, body)
	}
}

func TestHTTPAuthAndBadRequests(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(func(c *sim.Config) { c.Fault429 = 1 })) // validation comes before any fault
	c := freshClient(10 * time.Second)
	u := srv.URL + "/v1/messages"
	good := httpMsg("r", "+15551234567", "hi")
	for _, tc := range []struct {
		name, token, key, body string
		status                 int
		code                   string
	}{
		{"no token", "", "k", good, 401, "unauthorized"},
		{"blank token", " ", "k", good, 401, "unauthorized"},
		{"malformed JSON", "tok", "k", `{"to":`, 400, "invalid_request"},
		{"no recipient", "tok", "k", `{"text":"hi"}`, 400, "invalid_request"},
		{"no content", "tok", "k", `{"to":"+15551234567"}`, 400, "invalid_request"},
		{"bad key", "tok", "has space", good, 400, "invalid_idempotency_key"},
	} {
		r, err := post(c, u, tc.token, tc.key, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.status, r.body)
			continue
		}
		if e := decodeHTTPErr(t, r.body); e.Error.Code != tc.code || *e.Error.Retryable {
			t.Errorf("%s: %s, want code %s, not retryable", tc.name, r.body, tc.code)
		}
	}
	if n := s.DeliveryCount(); n != 0 {
		t.Fatalf("%d deliveries from refused requests", n)
	}
}

func TestHTTPReplayAndKeyReuse(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(nil))
	u := srv.URL + "/v1/messages"
	body := httpMsg("r1", "+15551234567", "hi")
	first := mustPost(t, u, "order-1", body)
	again := mustPost(t, u, "order-1", body)
	if first.status != 202 || again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" ||
		string(again.body) != string(first.body) {
		t.Fatalf("first %d %s; again %d %v %s", first.status, first.body, again.status, again.header, again.body)
	}
	other := mustPost(t, u, "order-1", httpMsg("r1", "+15551234567", "another text"))
	if other.status != http.StatusConflict {
		t.Fatalf("reused key: %d %s", other.status, other.body)
	}
	if e := decodeHTTPErr(t, other.body); e.Error.Code != "idempotency_key_reused" || *e.Error.Retryable {
		t.Fatalf("reused key: %s", other.body)
	}
	// Field order in the JSON does not make another body.
	reordered := `{"text":"hi","channel":"sms","to":"+15551234567","ref":"r1"}`
	if r := mustPost(t, u, "order-1", reordered); r.status != 200 {
		t.Fatalf("same body, other field order: %d %s", r.status, r.body)
	}
	if ds := deliveries(t, srv.URL); len(ds) != 1 {
		t.Fatalf("deliveries %+v, want one", ds)
	}
}

func TestHTTPNotIdempotentDeliversTwice(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(func(c *sim.Config) { c.Idempotent = false }))
	u := srv.URL + "/v1/messages"
	body := httpMsg("r1", "+15551234567", "hi")
	a, b := mustPost(t, u, "order-1", body), mustPost(t, u, "order-1", body)
	c := mustPost(t, u, "order-1", httpMsg("r1", "+15551234567", "other")) // no 409 either
	if a.status != 202 || b.status != 202 || c.status != 202 || b.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("got %d, %d, %d", a.status, b.status, c.status)
	}
	ds := deliveries(t, srv.URL)
	if len(ds) != 3 || ds[0].Key != "order-1" || ds[1].Key != "order-1" || ds[0].ID == ds[1].ID {
		t.Fatalf("deliveries %+v, want three with key order-1 and distinct ids", ds)
	}
	// Keys are not even checked.
	if r := mustPost(t, u, "has space", body); r.status != 202 {
		t.Fatalf("ignored key: %d %s", r.status, r.body)
	}
}

// TestFaultRefusals: each refusing fault with probability 1, over both
// APIs: the status, the body, Retry-After, and nothing delivered.
func TestFaultRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		set        func(*sim.Config)
		status     int
		code       string
		retryable  bool
		retryAfter bool
		waStatus   int
		waCode     int
	}{
		{"429", func(c *sim.Config) { c.Fault429 = 1 }, 429, "rate_limited", true, true, 400, 130429},
		{"5xx", func(c *sim.Config) { c.Fault5xx = 1 }, 500, "internal", true, false, 500, 131000},
		{"permanent", func(c *sim.Config) { c.FaultPermanent = 1 }, 422, "invalid_recipient", false, false, 400, 131026},
		{"pair", func(c *sim.Config) { c.FaultPair = 1 }, 429, "pair_rate_limited", true, true, 400, 131056},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, srv := serve(t, cfgWith(tc.set))
			r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("r", "+15551234567", "hi"))
			if r.status != tc.status {
				t.Fatalf("http: status %d, want %d: %s", r.status, tc.status, r.body)
			}
			e := decodeHTTPErr(t, r.body)
			if e.Error.Code != tc.code || *e.Error.Retryable != tc.retryable {
				t.Errorf("http: body %s, want code %s retryable %v", r.body, tc.code, tc.retryable)
			}
			if ra := r.header.Get("Retry-After"); (ra == "1") != tc.retryAfter {
				t.Errorf("http: Retry-After %q", ra)
			}

			w := mustPost(t, srv.URL+"/v21.0/1234567890/messages", "", waMsg("r", "+15551234567"))
			if w.status != tc.waStatus {
				t.Fatalf("whatsapp: status %d, want %d: %s", w.status, tc.waStatus, w.body)
			}
			we := decodeWAErr(t, w.body)
			if we.Error.Code != tc.waCode || we.Error.Type != "OAuthException" ||
				!strings.HasPrefix(we.Error.Message, fmt.Sprintf("(#%d) ", tc.waCode)) ||
				we.Error.ErrorData.MessagingProduct != "whatsapp" || we.Error.ErrorData.Details == "" {
				t.Errorf("whatsapp: body %s", w.body)
			}
			if s.DeliveryCount() != 0 || len(deliveries(t, srv.URL)) != 0 {
				t.Fatal("a refused call was delivered")
			}
		})
	}
}

// TestDrop: the call is accepted and recorded, then the connection closes
// with no response at all.
func TestDrop(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(func(c *sim.Config) { c.FaultDrop = 1 }))
	c := freshClient(5 * time.Second)
	_, err := post(c, srv.URL+"/v1/messages", "tok", "k1", httpMsg("r1", "+15551234567", "hi"))
	if err == nil || !errors.Is(err, io.EOF) {
		t.Fatalf("http: err %v, want the connection closed without a response (EOF)", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) || ue.Timeout() {
		t.Fatalf("http: err %v should be a closed connection, not a timeout", err)
	}
	_, err = post(c, srv.URL+"/v21.0/1234567890/messages", "tok", "", waMsg("r2", "+15557654321"))
	if err == nil || !errors.Is(err, io.EOF) {
		t.Fatalf("whatsapp: err %v, want EOF", err)
	}
	ds := deliveries(t, srv.URL)
	if len(ds) != 2 || ds[0].Key != "k1" || ds[0].Ref != "r1" || ds[0].API != "http" ||
		ds[1].Ref != "r2" || ds[1].API != "whatsapp" || !strings.HasPrefix(ds[1].ID, "wamid.") {
		t.Fatalf("deliveries %+v", ds)
	}
	if s.DeliveryCount() != 2 {
		t.Fatal("Deliveries and /deliveries disagree")
	}
}

// TestDropRemembersKey: after a dropped call, a retry with the same key
// that gets through is a replay of the dropped delivery.
func TestDropRemembersKey(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(func(c *sim.Config) { c.FaultDrop, c.Seed = 0.5, 3 }))
	c := freshClient(5 * time.Second)
	body := httpMsg("r1", "+15551234567", "hi")
	var drops int
	for range 64 {
		r, err := post(c, srv.URL+"/v1/messages", "tok", "k1", body)
		if err != nil {
			drops++
			continue
		}
		if drops == 0 {
			t.Fatal("seed 3 no longer drops the first call: pick another seed")
		}
		if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("after %d drops: %d %s, want a replay", drops, r.status, r.body)
		}
		if ds := deliveries(t, srv.URL); len(ds) != 1 || !strings.Contains(string(r.body), ds[0].ID) {
			t.Fatalf("deliveries %+v, answer %s", ds, r.body)
		}
		return
	}
	t.Fatal("every call dropped")
}

// TestTransportReplaysDroppedPOST pins a net/http behaviour provider
// clients must know: a POST carrying an Idempotency-Key header is
// "replayable", so when a reused keep-alive connection closes without a
// response the Transport silently sends it again on a new connection. Against
// a provider that ignores keys that is a second delivery the caller never saw.
func TestTransportReplaysDroppedPOST(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(func(c *sim.Config) { c.FaultDrop, c.Idempotent = 1, false }))
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	resp, err := c.Get(srv.URL + "/deliveries") // open the connection the POST reuses
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := post(c, srv.URL+"/v1/messages", "tok", "k1", httpMsg("r1", "+15551234567", "hi")); err == nil {
		t.Fatal("a dropped call answered")
	}
	if n := s.DeliveryCount(); n != 2 {
		t.Fatalf("%d deliveries, want 2: the Transport's own replay delivered again", n)
	}
}

// TestSlow: the call is recorded and answered only after SlowDelay, after a
// client with a shorter timeout gave up; a patient client gets the answer.
func TestSlow(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	_, srv := serve(t, cfgWith(func(c *sim.Config) { c.FaultSlow, c.SlowDelay = 1, delay }))
	u := srv.URL + "/v1/messages"
	_, err := post(freshClient(50*time.Millisecond), u, "tok", "k1", httpMsg("r1", "+15551234567", "hi"))
	var ue *url.Error
	if !errors.As(err, &ue) || !ue.Timeout() {
		t.Fatalf("err %v, want a client timeout", err)
	}
	if ds := deliveries(t, srv.URL); len(ds) != 1 || ds[0].Key != "k1" {
		t.Fatalf("deliveries %+v, want the slow call delivered", ds)
	}
	start := time.Now()
	r, err := post(freshClient(10*time.Second), u, "tok", "k2", httpMsg("r2", "+15551234567", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay || r.status != 202 {
		t.Fatalf("patient client: %d after %v, want 202 after %v", r.status, took, delay)
	}
	start = time.Now()
	w, err := post(freshClient(10*time.Second), srv.URL+"/v21.0/1/messages", "tok", "", waMsg("r3", "+15551234567"))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay || w.status != 200 {
		t.Fatalf("whatsapp: %d after %v", w.status, took)
	}
}

// TestLatency: every provider call waits first; a caller that gives up
// during the wait delivered nothing; the delivery log answers at once.
func TestLatency(t *testing.T) {
	t.Parallel()
	const latency = 200 * time.Millisecond
	s, srv := serve(t, cfgWith(func(c *sim.Config) { c.Latency = latency }))
	u := srv.URL + "/v1/messages"
	start := time.Now()
	if r := mustPost(t, u, "k1", httpMsg("r1", "+15551234567", "hi")); r.status != 202 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if took := time.Since(start); took < latency {
		t.Fatalf("answered after %v, want at least %v", took, latency)
	}
	if _, err := post(freshClient(20*time.Millisecond), u, "tok", "k2", httpMsg("r2", "+15551234567", "hi")); err == nil {
		t.Fatal("answered within the client's timeout")
	}
	start = time.Now()
	_ = deliveries(t, srv.URL)
	if took := time.Since(start); took >= latency {
		t.Errorf("/deliveries took %v: latency should not apply", took)
	}
	time.Sleep(2 * latency) // the abandoned call would have been decided by now
	if ds := s.Deliveries(); len(ds) != 1 || ds[0].Key != "k1" {
		t.Fatalf("deliveries %+v, want only k1", ds)
	}
}

func TestWhatsApp(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(nil))
	u := srv.URL + "/v21.0/106540352242922/messages"
	r := mustPost(t, u, "k1", waMsg("01REF", "+15551234567"))
	want := `{"messaging_product":"whatsapp","contacts":[{"input":"+15551234567","wa_id":"15551234567"}],"messages":[{"id":"wamid.1","message_status":"accepted"}]}`
	if r.status != 200 || string(r.body) != want {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	// No idempotency on the Graph API: the same call is a second delivery,
	// whatever headers it carries.
	if r := mustPost(t, srv.URL+"/v19.0/1/messages", "k1", waMsg("01REF", "+15551234567")); r.status != 200 {
		t.Fatalf("again: %d %s", r.status, r.body)
	}
	text := `{"messaging_product":"whatsapp","to":"+15557654321","type":"text","text":{"body":"hi"}}`
	if r := mustPost(t, u, "", text); r.status != 200 {
		t.Fatalf("text: %d %s", r.status, r.body)
	}
	ds := s.Deliveries()
	wantDs := []sim.Delivery{
		{Key: "k1", Ref: "01REF", To: "+15551234567", At: fixedNow, ID: "wamid.1", API: "whatsapp"},
		{Key: "k1", Ref: "01REF", To: "+15551234567", At: fixedNow, ID: "wamid.2", API: "whatsapp"},
		{Key: "", Ref: "", To: "+15557654321", At: fixedNow, ID: "wamid.3", API: "whatsapp"},
	}
	if !reflect.DeepEqual(ds, wantDs) {
		t.Fatalf("deliveries %+v\nwant %+v", ds, wantDs)
	}

	c := freshClient(5 * time.Second)
	noAuth, err := post(c, u, "", "", waMsg("r", "+15551234567"))
	if err != nil {
		t.Fatal(err)
	}
	if e := decodeWAErr(t, noAuth.body); noAuth.status != 401 || e.Error.Code != 190 {
		t.Fatalf("no token: %d %s", noAuth.status, noAuth.body)
	}
	for _, bad := range []string{
		`{"to":`,
		`{"messaging_product":"whatsapp","type":"text","text":{"body":"hi"}}`,
		`{"messaging_product":"sms","to":"+15551234567","type":"text","text":{"body":"hi"}}`,
		`{"messaging_product":"whatsapp","to":"+15551234567","type":"template","template":{"name":"x"}}`,
		`{"messaging_product":"whatsapp","to":"+15551234567","type":"text"}`,
		`{"messaging_product":"whatsapp","to":"+15551234567","type":"image","image":{"id":"1"}}`,
	} {
		r, err := post(c, u, "tok", "", bad)
		if err != nil {
			t.Fatal(err)
		}
		if e := decodeWAErr(t, r.body); r.status != 400 || e.Error.Code != 100 {
			t.Errorf("%s: %d %s, want 400 code 100", bad, r.status, r.body)
		}
	}
	if n := s.DeliveryCount(); n != 3 {
		t.Fatalf("%d deliveries after refused calls, want 3", n)
	}
}

// TestDeliveriesJSON pins the field names of GET /deliveries, the stamp's
// format, [] when empty, and DELETE.
func TestDeliveriesJSON(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(nil))
	raw := func() string {
		resp, err := http.Get(srv.URL + "/deliveries")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := raw(); got != "[]" {
		t.Fatalf("empty log: %s", got)
	}
	mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("r1", "+15551234567", "hi"))
	want := `[{"key":"k1","ref":"r1","to":"+15551234567","at":"2026-03-14T15:09:26.535897932Z","id":"msg_1","api":"http"}]`
	if got := raw(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	var ds []map[string]any
	if err := json.Unmarshal([]byte(want), &ds); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339Nano, ds[0]["at"].(string)); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/deliveries", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || raw() != "[]" {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	// The provider still remembers the key.
	if r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("r1", "+15551234567", "hi")); r.status != 200 {
		t.Fatalf("after DELETE: %d %s", r.status, r.body)
	}
}

// TestConcurrentHTTP: 64 goroutines, distinct keys and one shared key:
// every distinct key is delivered once, the shared key once in all.
func TestConcurrentHTTP(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(nil))
	const workers, each = 64, 8
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Timeout: 20 * time.Second, Transport: tr}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				if i == 0 {
					key = "shared"
				}
				r, err := post(c, srv.URL+"/v1/messages", "tok", key, httpMsg("ref-"+key, "+15551234567", "hi"))
				if err != nil {
					t.Error(err)
					return
				}
				if i == 0 {
					mu.Lock()
					statuses[r.status]++
					mu.Unlock()
				} else if r.status != 202 {
					t.Errorf("%s: %d", key, r.status)
				}
			}
		})
	}
	wg.Wait()
	if statuses[202] != 1 || statuses[200] != workers-1 {
		t.Errorf("shared key statuses %v, want one 202 and %d replays", statuses, workers-1)
	}
	checkOnce(t, s.Deliveries(), workers*(each-1)+1)
}

// checkOnce: n deliveries, no key and no id twice.
func checkOnce(t *testing.T, ds []sim.Delivery, n int) {
	t.Helper()
	if len(ds) != n {
		t.Fatalf("%d deliveries, want %d", len(ds), n)
	}
	keys, ids := map[string]bool{}, map[string]bool{}
	for _, d := range ds {
		if keys[d.Key] || ids[d.ID] {
			t.Fatalf("delivered twice: %+v", d)
		}
		keys[d.Key], ids[d.ID] = true, true
	}
	if !slices.IsSortedFunc(ds, func(a, b sim.Delivery) int { return a.At.Compare(b.At) }) {
		t.Error("deliveries out of order")
	}
}

// TestTheCallLogHoldsEveryDecidedCall: replays and refusals deliver
// nothing, yet each is a call, in order, with what became of it.
func TestTheCallLogHoldsEveryDecidedCall(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(nil))
	u := srv.URL + "/v1/messages"
	body := httpMsg("r1", "+15551234567", "hi")
	mustPost(t, u, "order-1", body)
	mustPost(t, u, "order-1", body)
	mustPost(t, u, "order-1", httpMsg("r1", "+15551234567", "another text"))
	mustPost(t, srv.URL+"/v21.0/1234567890/messages", "", waMsg("r2", "+15551234568"))
	if r, err := post(freshClient(10*time.Second), u, "", "order-2", body); err != nil || r.status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated: %v %v", r, err)
	}
	_, refusing := serve(t, cfgWith(func(c *sim.Config) { c.Fault5xx = 1 }))
	mustPost(t, refusing.URL+"/v1/messages", "order-3", body)

	resp, err := http.Get(srv.URL + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var calls []sim.Call
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range calls {
		got = append(got, c.API+" "+c.Key+" "+c.Ref+" "+c.Result)
		if !c.At.Equal(fixedNow) || c.To == "" {
			t.Errorf("call %+v: want the sim's time and the recipient", c)
		}
	}
	want := []string{"http order-1 r1 delivered", "http order-1 r1 replayed", "http order-1 r1 conflict", "whatsapp  r2 delivered"}
	if !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q (an unauthenticated request is no call)", got, want)
	}
	if len(deliveries(t, srv.URL)) != 2 {
		t.Errorf("deliveries: want the two new messages")
	}
	resp2, err := http.Get(refusing.URL + "/calls")
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var refused []sim.Call
	if err := json.NewDecoder(resp2.Body).Decode(&refused); err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || refused[0].Result != "fault-5xx" {
		t.Errorf("a refused call: %+v", refused)
	}
}
