package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
)

const (
	twAccount = "AC0123456789abcdef0123456789abcdef"
	twToken   = "sim-twilio-token"
	twFrom    = "+15550000000"
	twTo      = "+15551234567"
)

func twPath(rest string) string { return "/2010-04-01/Accounts/" + twAccount + "/Messages" + rest }

// twCall makes one request with basic auth user:pass (none when user is "").
func twCall(t *testing.T, method, u, user, pass string, form url.Values) *reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := freshClient(10 * time.Second).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return &reply{resp.StatusCode, resp.Header, b}
}

func twSendForm(to, body, callback string) url.Values {
	f := url.Values{"To": {to}, "From": {twFrom}, "Body": {body}}
	if callback != "" {
		f.Set("StatusCallback", callback)
	}
	return f
}

type twRes struct {
	SID         string `json:"sid"`
	Status      string `json:"status"`
	To          string `json:"to"`
	From        string `json:"from"`
	Body        string `json:"body"`
	Direction   string `json:"direction"`
	NumSegments string `json:"num_segments"`
	DateCreated string `json:"date_created"`
}

func decodeRes(t *testing.T, r *reply) twRes {
	t.Helper()
	var v twRes
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return v
}

// clock is a settable clock for the simulator.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestTwilioCreateFetchAndList(t *testing.T) {
	t.Parallel()
	clk := &clock{t: fixedNow}
	s, srv := serve(t, cfgWith(func(c *sim.Config) { c.Now = clk.now; c.StatusDelay = time.Minute }))

	r := twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm(twTo, "hello €", "https://h.example/tw?msgq_id=ROW1"))
	m := decodeRes(t, r)
	if r.status != http.StatusCreated || m.Status != "queued" || !strings.HasPrefix(m.SID, "SM") || len(m.SID) != 34 ||
		m.To != twTo || m.From != twFrom || m.Direction != "outbound-api" || m.NumSegments != "1" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	ds := s.Deliveries()
	if len(ds) != 1 || ds[0].API != sim.APITwilio || ds[0].Channel != "sms" || ds[0].Ref != "ROW1" || ds[0].ID != m.SID || ds[0].To != twTo {
		t.Fatalf("deliveries %+v", ds)
	}

	get := twCall(t, "GET", srv.URL+twPath("/"+m.SID+".json"), twAccount, "tok", nil)
	if g := decodeRes(t, get); get.status != 200 || g.Status != "sent" || g.SID != m.SID {
		t.Errorf("fetch: %d %s", get.status, get.body)
	}
	clk.add(time.Minute)
	if g := decodeRes(t, twCall(t, "GET", srv.URL+twPath("/"+m.SID+".json"), twAccount, "tok", nil)); g.Status != "delivered" {
		t.Errorf("after StatusDelay: %+v", g)
	}
	for _, p := range []string{"/SMnope.json", "/" + m.SID} {
		if r := twCall(t, "GET", srv.URL+twPath(p), twAccount, "tok", nil); r.status != 404 || twCode(t, r) != 20404 {
			t.Errorf("GET %s: %d %s", p, r.status, r.body)
		}
	}
	other := "/2010-04-01/Accounts/ACffffffffffffffffffffffffffffffff/Messages/" + m.SID + ".json"
	if r := twCall(t, "GET", srv.URL+other, "ACffffffffffffffffffffffffffffffff", "tok", nil); r.status != 404 {
		t.Errorf("another account's message: %d", r.status)
	}

	// Two more, one to someone else; list with filters and pages of one.
	twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm(twTo, "second", ""))
	twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm("+15557654321", "third", ""))
	day := fixedNow.Format(time.DateOnly)
	q := url.Values{"To": {twTo}, "From": {twFrom}, "DateSent>": {day}, "DateSent<": {day}, "PageSize": {"1"}}
	var bodies []string
	next := twPath(".json") + "?" + q.Encode()
	for next != "" {
		r := twCall(t, "GET", srv.URL+next, twAccount, "tok", nil)
		var page struct {
			Messages    []twRes `json:"messages"`
			NextPageURI *string `json:"next_page_uri"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil || r.status != 200 {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		for _, m := range page.Messages {
			bodies = append(bodies, m.Body)
		}
		next = ""
		if page.NextPageURI != nil {
			next = *page.NextPageURI
		}
	}
	if strings.Join(bodies, ",") != "second,hello €" {
		t.Errorf("listed %q, want the two to %s, newest first", bodies, twTo)
	}
	q.Set("DateSent<", "2000-01-01")
	r = twCall(t, "GET", srv.URL+twPath(".json")+"?"+q.Encode(), twAccount, "tok", nil)
	if !bytes.Contains(r.body, []byte(`"messages":[]`)) {
		t.Errorf("a window before any message: %s", r.body)
	}
}

func TestTwilioAuthAndValidation(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(nil))
	u := srv.URL + twPath(".json")
	for _, tc := range []struct {
		name       string
		user, pass string
		form       url.Values
		status     int
		code       int
	}{
		{"no auth", "", "", twSendForm(twTo, "x", ""), 401, 20003},
		{"another account's user", "ACffffffffffffffffffffffffffffffff", "tok", twSendForm(twTo, "x", ""), 401, 20003},
		{"no password", twAccount, "", twSendForm(twTo, "x", ""), 401, 20003},
		{"no To", twAccount, "tok", url.Values{"From": {twFrom}, "Body": {"x"}}, 400, 21604},
		{"a To that is not E.164", twAccount, "tok", twSendForm("5551234567", "x", ""), 400, 21211},
		{"no From", twAccount, "tok", url.Values{"To": {twTo}, "Body": {"x"}}, 400, 21603},
		{"no Body", twAccount, "tok", twSendForm(twTo, "", ""), 400, 21602},
		{"a bad StatusCallback", twAccount, "tok", twSendForm(twTo, "x", "ftp://x"), 400, 21609},
	} {
		r := twCall(t, "POST", u, tc.user, tc.pass, tc.form)
		if r.status != tc.status || twCode(t, r) != tc.code {
			t.Errorf("%s: %d %s, want %d code %d", tc.name, r.status, r.body, tc.status, tc.code)
		}
	}
	if n := len(s.Calls()); n != 0 {
		t.Errorf("%d calls decided for refused requests", n)
	}
	// An API key authenticates for any account.
	if r := twCall(t, "POST", u, "SK0123456789abcdef0123456789abcdef", "secret", twSendForm(twTo, "x", "")); r.status != 201 {
		t.Errorf("API key: %d %s", r.status, r.body)
	}
}

func TestTwilioFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		set        func(*sim.Config)
		status     int
		code       int
		retryAfter string
	}{
		{"429", func(c *sim.Config) { c.Fault429 = 1 }, 429, 20429, "1"},
		{"pair", func(c *sim.Config) { c.FaultPair = 1 }, 429, 20429, "1"},
		{"5xx", func(c *sim.Config) { c.Fault5xx = 1 }, 500, 20500, ""},
		{"permanent", func(c *sim.Config) { c.FaultPermanent = 1 }, 400, 21614, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, srv := serve(t, cfgWith(tc.set))
			r := twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm(twTo, "x", ""))
			if r.status != tc.status || twCode(t, r) != tc.code || r.header.Get("Retry-After") != tc.retryAfter {
				t.Errorf("%d %s (Retry-After %q)", r.status, r.body, r.header.Get("Retry-After"))
			}
			if n := s.DeliveryCount(); n != 0 {
				t.Errorf("%d deliveries", n)
			}
			if cs := s.Calls(); len(cs) != 1 || cs[0].API != sim.APITwilio || cs[0].Result != "fault-"+tc.name {
				t.Errorf("calls %+v", cs)
			}
		})
	}
	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		s, srv := serve(t, cfgWith(func(c *sim.Config) { c.FaultDrop = 1 }))
		req, _ := http.NewRequest("POST", srv.URL+twPath(".json"), strings.NewReader(twSendForm(twTo, "x", "").Encode()))
		req.SetBasicAuth(twAccount, "tok")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if resp, err := freshClient(10 * time.Second).Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("an answer: %d", resp.StatusCode)
		}
		if n := s.DeliveryCount(); n != 1 {
			t.Errorf("%d deliveries, want the dropped one recorded", n)
		}
	})
}

// twReceiver is msgq's side: it records every form posted to it, with
// the URL it was called at and the signature.
type twReceiver struct {
	srv  *httptest.Server
	got  chan twPosted
	code int
}

type twPosted struct {
	url  string
	form url.Values
	sig  string
}

func newTwReceiver(t *testing.T) *twReceiver {
	rc := &twReceiver{got: make(chan twPosted, 16), code: 204}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f, _ := url.ParseQuery(string(b))
		rc.got <- twPosted{"http://" + r.Host + r.URL.RequestURI(), f, r.Header.Get(twilio.SignatureHeader)}
		w.WriteHeader(rc.code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *twReceiver) next(t *testing.T) twPosted {
	t.Helper()
	select {
	case p := <-rc.got:
		return p
	case <-time.After(30 * time.Second):
		t.Fatal("nothing posted in 30 s")
		return twPosted{}
	}
}

func TestTwilioStatusCallbacksAreSignedAndNameTheRow(t *testing.T) {
	t.Parallel()
	rc := newTwReceiver(t)
	s, srv := serve(t, cfgWith(func(c *sim.Config) {
		c.TwilioAuthToken = twToken
		c.StatusDelay = 10 * time.Millisecond
		c.FaultDrop = 1 // the answer is lost; the callbacks still come
	}))
	t.Cleanup(s.Close)
	cb := rc.srv.URL + "/webhooks/twilio?msgq_id=ROW9"
	req, _ := http.NewRequest("POST", srv.URL+twPath(".json"), strings.NewReader(twSendForm(twTo, "x", cb).Encode()))
	req.SetBasicAuth(twAccount, "tok")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := freshClient(10 * time.Second).Do(req); err == nil {
		resp.Body.Close()
	}
	want := map[string]state.State{"sent": state.Sent, "delivered": state.Delivered}
	for range 2 {
		p := rc.next(t)
		if p.url != cb {
			t.Errorf("posted to %s, want %s", p.url, cb)
		}
		if !twilio.ValidSignature(p.url, p.form, twToken, p.sig) {
			t.Errorf("signature %q does not validate", p.sig)
		}
		b, err := twilio.ParseStatusCallback(p.url, p.form, fixedNow)
		if err != nil || len(b.Statuses) != 1 {
			t.Fatalf("parse: %+v %v", b, err)
		}
		st := b.Statuses[0]
		if st.CallbackRef != "ROW9" || st.Status != want[p.form.Get("MessageStatus")] || st.ProviderID != s.Deliveries()[0].ID {
			t.Errorf("status %+v", st.StatusEvidence)
		}
		delete(want, p.form.Get("MessageStatus"))
	}
	if len(want) != 0 {
		t.Errorf("statuses not received: %v", want)
	}
}

func TestTwilioInjectedSTOPBlocksTheSenderUntilSTART(t *testing.T) {
	t.Parallel()
	rc := newTwReceiver(t)
	_, srv := serve(t, cfgWith(func(c *sim.Config) {
		c.TwilioAuthToken = twToken
		c.TwilioInboundURL = rc.srv.URL + "/webhooks/twilio/inbound"
	}))
	inject := func(body string) {
		t.Helper()
		b, _ := json.Marshal(map[string]string{"from": twTo, "to": twFrom, "body": body})
		r, err := post(freshClient(10*time.Second), srv.URL+"/sim/twilio/inbound", "", "", string(b))
		if err != nil || r.status != 200 || !bytes.Contains(r.body, []byte(`"status":204`)) {
			t.Fatalf("inject: %v %+v", err, r)
		}
		p := rc.next(t)
		if !twilio.ValidSignature(p.url, p.form, twToken, p.sig) {
			t.Errorf("inbound signature %q does not validate", p.sig)
		}
		batch, err := twilio.ParseInbound(p.form, fixedNow)
		if err != nil || len(batch.Inbound) != 1 || batch.Inbound[0].Text != body || batch.Inbound[0].From != twTo {
			t.Fatalf("parse inbound: %+v %v", batch, err)
		}
	}
	send := func() *reply {
		return twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm(twTo, "x", ""))
	}
	inject("STOP")
	if r := send(); r.status != 400 || twCode(t, r) != 21610 {
		t.Fatalf("send after STOP: %d %s", r.status, r.body)
	}
	// Another sender is not blocked.
	f := twSendForm(twTo, "x", "")
	f.Set("From", "+15550000001")
	if r := twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", f); r.status != 201 {
		t.Errorf("another sender: %d", r.status)
	}
	inject("hello")
	if r := send(); r.status != 400 {
		t.Errorf("a plain message lifted the block: %d", r.status)
	}
	inject("start")
	if r := send(); r.status != 201 {
		t.Errorf("send after START: %d %s", r.status, r.body)
	}
}

func TestTwilioInjectNeedsTheConfig(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, cfgWith(nil))
	r, err := post(freshClient(10*time.Second), srv.URL+"/sim/twilio/inbound", "", "", `{"from":"+15551234567","to":"+15550000000","body":"hi"}`)
	if err != nil || r.status != http.StatusConflict {
		t.Errorf("%v %+v", err, r)
	}
	if err := cfgWith(func(c *sim.Config) { c.TwilioInboundURL = "http://127.0.0.1:1/x" }).Validate(); err == nil ||
		!strings.Contains(err.Error(), "twilio auth token") {
		t.Errorf("an inbound URL without a token: %v", err)
	}
	if err := cfgWith(func(c *sim.Config) { c.TwilioAuthToken = "t"; c.TwilioInboundURL = "nope" }).Validate(); err == nil {
		t.Error("a bad inbound URL validated")
	}
}

// twCode is a Twilio error answer's code.
func twCode(t *testing.T, r *reply) int {
	t.Helper()
	var e struct {
		Code int `json:"code"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("%d %s: %v", r.status, r.body, err)
	}
	return e.Code
}

// TestTheClockMovesForwardOnRequest: POST /sim/clock moves the
// simulator's clock, so a test can have a message dated later than its
// real time (reconcile's search window) without waiting; it never moves
// back, and a bad body is refused and changes nothing.
func TestTheClockMovesForwardOnRequest(t *testing.T) {
	t.Parallel()
	s, srv := serve(t, cfgWith(func(c *sim.Config) { c.StatusDelay = time.Hour }))
	first := decodeRes(t, twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm(twTo, "one", "")))
	for _, body := range []string{`{"advance":"-1m"}`, `{"advance":"0s"}`, `{"advance":"soon"}`, `{}`, `not json`} {
		if r := mustPost(t, srv.URL+"/sim/clock", "", body); r.status != http.StatusBadRequest || !bytes.Contains(r.body, []byte(`"error"`)) {
			t.Errorf("POST /sim/clock %s: %d %s, want 400", body, r.status, r.body)
		}
	}
	r := mustPost(t, srv.URL+"/sim/clock", "", `{"advance":"20m"}`)
	var ans struct{ Now time.Time }
	if err := json.Unmarshal(r.body, &ans); err != nil || r.status != http.StatusOK || !ans.Now.Equal(fixedNow.Add(20*time.Minute)) {
		t.Fatalf("POST /sim/clock: %d %s, want now %v", r.status, r.body, fixedNow.Add(20*time.Minute))
	}
	second := decodeRes(t, twCall(t, "POST", srv.URL+twPath(".json"), twAccount, "tok", twSendForm(twTo, "two", "")))
	d1, err1 := time.Parse(time.RFC1123Z, first.DateCreated)
	d2, err2 := time.Parse(time.RFC1123Z, second.DateCreated)
	if err1 != nil || err2 != nil || d2.Sub(d1) != 20*time.Minute {
		t.Errorf("date_created %q then %q, want 20m apart", first.DateCreated, second.DateCreated)
	}
	if ds := s.Deliveries(); len(ds) != 2 || ds[1].At.Sub(ds[0].At) != 20*time.Minute {
		t.Errorf("deliveries %+v, want logged 20m apart", ds)
	}
	if _, err := s.Advance(-time.Second); err == nil {
		t.Error("Advance(-1s) moved the clock back")
	}
}
