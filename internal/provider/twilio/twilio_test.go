package twilio_test

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

const (
	accountSID = "AC0123456789abcdef0123456789abcdef"
	authToken  = "twilio-auth-token-value"
	apiKeySID  = "SK0123456789abcdef0123456789abcdef"
	apiSecret  = "api-key-secret-value"
	serviceSID = "MG0123456789abcdef0123456789abcdef"
	sender     = "+15550000000"
	recipient  = "+15551234567"
)

var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Form                   url.Values
}

// fakeTwilio is a real HTTP server answering every request with status,
// headers and body, and recording what it received.
type fakeTwilio struct {
	srv     *httptest.Server
	handler func(w http.ResponseWriter, r *http.Request)
	mu      sync.Mutex
	reqs    []recorded
}

func newFake(t *testing.T, status int, header http.Header, body string) *fakeTwilio {
	t.Helper()
	return newFakeFunc(t, func(w http.ResponseWriter, _ *http.Request) {
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	})
}

func newFakeFunc(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *fakeTwilio {
	t.Helper()
	f := &fakeTwilio{handler: h}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(b))
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), form})
		f.mu.Unlock()
		f.handler(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeTwilio) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func config(base string, hc *http.Client) twilio.Config {
	return twilio.Config{
		BaseURL:        base,
		AccountSID:     accountSID,
		AuthToken:      authToken,
		From:           sender,
		StatusCallback: "https://hooks.example.com/webhooks/twilio",
		HTTPClient:     hc,
		Now:            func() time.Time { return now },
	}
}

func (f *fakeTwilio) client() *twilio.Client { return twilio.New(config(f.srv.URL, f.srv.Client())) }

func textMessage() *provider.Message {
	return &provider.Message{ID: "01MSGQROW", Key: "k1", To: recipient, Channel: "sms",
		Payload: store.Payload{Text: "Your code is 1234"}}
}

const created = `{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued","to":"+15551234567","from":"+15550000000","body":"Your code is 1234","direction":"outbound-api"}`

func TestSendPostsTheDocumentedForm(t *testing.T) {
	f := newFake(t, http.StatusCreated, nil, created)
	res := f.client().Send(context.Background(), textMessage())
	if res.Class != retry.Accepted || res.ProviderID != "SM0123456789abcdef0123456789abcdef" || res.HTTPStatus != 201 {
		t.Fatalf("result = %+v", res)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/2010-04-01/Accounts/"+accountSID+"/Messages.json" {
		t.Errorf("request %s %s", r.Method, r.Path)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		t.Errorf("Content-Type %q", ct)
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(accountSID+":"+authToken))
	if got := r.Header.Get("Authorization"); got != want {
		t.Errorf("Authorization %q, want basic auth with the account SID and token", got)
	}
	wantForm := url.Values{
		"To":             {recipient},
		"From":           {sender},
		"Body":           {"Your code is 1234"},
		"StatusCallback": {"https://hooks.example.com/webhooks/twilio?msgq_id=01MSGQROW"},
	}
	if r.Form.Encode() != wantForm.Encode() {
		t.Errorf("form\n got %s\nwant %s", r.Form.Encode(), wantForm.Encode())
	}
}

func TestSendWithAnAPIKeyAndAMessagingService(t *testing.T) {
	f := newFake(t, http.StatusCreated, nil, created)
	cfg := config(f.srv.URL, f.srv.Client())
	cfg.APIKeySID, cfg.APIKeySecret = apiKeySID, apiSecret
	cfg.From, cfg.MessagingServiceSID = "", serviceSID
	cfg.StatusCallback = "https://hooks.example.com/twilio?tenant=a"
	if res := twilio.New(cfg).Send(context.Background(), textMessage()); res.Class != retry.Accepted {
		t.Fatalf("result = %+v", res)
	}
	r := f.requests()[0]
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte(apiKeySID+":"+apiSecret)); r.Header.Get("Authorization") != want {
		t.Errorf("Authorization %q: want the API key", r.Header.Get("Authorization"))
	}
	if r.Form.Get("MessagingServiceSid") != serviceSID || r.Form.Has("From") {
		t.Errorf("form %v: want MessagingServiceSid and no From", r.Form)
	}
	if cb := r.Form.Get("StatusCallback"); cb != "https://hooks.example.com/twilio?msgq_id=01MSGQROW&tenant=a" {
		t.Errorf("StatusCallback %q: want the base's query kept and msgq_id added", cb)
	}
}

func TestSendWithoutStatusCallbackAsksForNone(t *testing.T) {
	f := newFake(t, http.StatusCreated, nil, created)
	cfg := config(f.srv.URL, f.srv.Client())
	cfg.StatusCallback = ""
	twilio.New(cfg).Send(context.Background(), textMessage())
	if f.requests()[0].Form.Has("StatusCallback") {
		t.Error("StatusCallback sent without a configured base")
	}
}

func TestSendRefusesTemplatesAndEmptyTextWithoutACall(t *testing.T) {
	f := newFake(t, http.StatusCreated, nil, created)
	for _, p := range []store.Payload{{Template: "order_ready", Lang: "en", Params: []string{"1"}}, {}} {
		m := textMessage()
		m.Payload = p
		res := f.client().Send(context.Background(), m)
		if res.Class != retry.Permanent || res.HTTPStatus != 0 || !strings.HasPrefix(res.RawError, "msgq: ") {
			t.Errorf("payload %+v: result %+v, want a local Permanent", p, res)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d calls made for payloads that cannot be sent", n)
	}
	// A payload with both is sent as its text.
	m := textMessage()
	m.Payload.Template = "order_ready"
	if res := f.client().Send(context.Background(), m); res.Class != retry.Accepted {
		t.Errorf("template and text: %+v", res)
	}
}

func twilioError(code, status int, msg string) string {
	return `{"code":` + itoa(code) + `,"message":"` + msg + `","more_info":"https://www.twilio.com/docs/errors/` + itoa(code) + `","status":` + itoa(status) + `}`
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

func TestSendClassifiesEveryAnswer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		header     http.Header
		body       string
		class      retry.Class
		code       string
		retryAfter time.Duration
	}{
		{"invalid To", 400, nil, twilioError(21211, 400, "The 'To' number is not a valid phone number."), retry.Permanent, "21211", 0},
		{"not a mobile number", 400, nil, twilioError(21614, 400, "'To' number is not a valid mobile number"), retry.Permanent, "21614", 0},
		{"cannot route", 400, nil, twilioError(21612, 400, "cannot route"), retry.Permanent, "21612", 0},
		{"opted out", 400, nil, twilioError(21610, 400, "Attempt to send to unsubscribed recipient"), retry.Permanent, "21610", 0},
		{"region not enabled", 400, nil, twilioError(21408, 400, "Permission to send an SMS has not been enabled"), retry.Permanent, "21408", 0},
		{"bad credentials", 401, nil, twilioError(20003, 401, "Authenticate"), retry.Identity, "20003", 0},
		{"account not active", 401, nil, twilioError(20005, 401, "Account not active"), retry.Identity, "20005", 0},
		{"From not a Twilio number", 400, nil, twilioError(21606, 400, "The From phone number is not valid"), retry.Identity, "21606", 0},
		{"wrong account SID", 404, nil, twilioError(20404, 404, "The requested resource was not found"), retry.Identity, "20404", 0},
		{"too many requests with Retry-After", 429, http.Header{"Retry-After": {"7"}}, twilioError(20429, 429, "Too Many Requests"), retry.RateLimited, "20429", 7 * time.Second},
		{"too many requests without a code", 429, nil, "slow down", retry.RateLimited, "", 0},
		{"queue overflow gets its floor", 429, http.Header{"Retry-After": {"2"}}, twilioError(30001, 429, "Queue overflow"), retry.RateLimited, "30001", twilio.QueueOverflowDelay},
		{"an unlisted 4xx code is a refusal", 400, nil, twilioError(21999, 400, "something new"), retry.Permanent, "21999", 0},
		{"an unlisted 401 code is the identity", 401, nil, twilioError(20999, 401, "x"), retry.Identity, "20999", 0},
		{"500 with Twilio's code may have sent", 500, nil, twilioError(20500, 500, "Internal Server Error"), retry.Ambiguous, "20500", 0},
		{"503 may have sent", 503, nil, twilioError(20503, 503, "Service Unavailable"), retry.Ambiguous, "20503", 0},
		{"502 from a proxy", 502, nil, "<html>bad gateway</html>", retry.Ambiguous, "", 0},
		{"201 without a sid", 201, nil, `{"status":"queued"}`, retry.Ambiguous, "", 0},
		{"a redirect is not followed", 307, http.Header{"Location": {"/elsewhere"}}, "", retry.Ambiguous, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.status, tc.header, tc.body)
			res := f.client().Send(context.Background(), textMessage())
			if res.Class != tc.class || res.Code != tc.code || res.RetryAfter != tc.retryAfter || res.HTTPStatus != tc.status {
				t.Errorf("result %+v\nwant class %s code %q retry-after %v status %d", res, tc.class, tc.code, tc.retryAfter, tc.status)
			}
			if res.RawError != tc.body {
				t.Errorf("RawError %q, want the body verbatim", res.RawError)
			}
			if got := twilio.OptedOut(res.Code); got != (tc.code == "21610") {
				t.Errorf("OptedOut(%q) = %v", res.Code, got)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func TestSendWithNoAnswer(t *testing.T) {
	t.Run("connection refused: never written, transient", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		res := twilio.New(config("http://"+addr, nil)).Send(context.Background(), textMessage())
		if res.Class != retry.Transient || res.HTTPStatus != 0 {
			t.Errorf("result %+v, want Transient", res)
		}
	})
	t.Run("connection dropped after the request: ambiguous", func(t *testing.T) {
		f := newFakeFunc(t, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		res := f.client().Send(context.Background(), textMessage())
		if res.Class != retry.Ambiguous || res.HTTPStatus != 0 {
			t.Errorf("result %+v, want Ambiguous", res)
		}
		if len(f.requests()) != 1 {
			t.Error("the request did not reach the server")
		}
	})
	t.Run("deadline after the request was written: ambiguous", func(t *testing.T) {
		release := make(chan struct{})
		f := newFakeFunc(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for len(f.requests()) == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		res := f.client().Send(ctx, textMessage())
		if res.Class != retry.Ambiguous {
			t.Errorf("result %+v, want Ambiguous", res)
		}
	})
	t.Run("misconfigured identity: no call, identity", func(t *testing.T) {
		cfg := config("ftp://nowhere", nil)
		res := twilio.New(cfg).Send(context.Background(), textMessage())
		if res.Class != retry.Identity {
			t.Errorf("result %+v, want Identity", res)
		}
	})
}

func TestNotIdempotent(t *testing.T) {
	if twilio.New(config("", nil)).Idempotent() {
		t.Error("Twilio's Messages API has no idempotency key")
	}
}

func TestConfigValidate(t *testing.T) {
	good := config("", nil)
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*twilio.Config)
		want string
	}{
		{"account SID", func(c *twilio.Config) { c.AccountSID = "AC123" }, "account SID"},
		{"no credential", func(c *twilio.Config) { c.AuthToken = "" }, "auth token or an API key"},
		{"half an API key", func(c *twilio.Config) { c.APIKeySID = apiKeySID }, "go together"},
		{"no sender", func(c *twilio.Config) { c.From = "" }, "From sender or a messaging service"},
		{"two senders", func(c *twilio.Config) { c.MessagingServiceSID = serviceSID }, "not both"},
		{"bad callback", func(c *twilio.Config) { c.StatusCallback = "ftp://user:pw@x" }, "status callback"},
		{"bad base", func(c *twilio.Config) { c.BaseURL = "api.twilio.com" }, "base URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), authToken) || strings.Contains(err.Error(), "pw") {
				t.Errorf("error quotes a secret: %v", err)
			}
		})
	}
	s := twilio.New(good).String()
	if strings.Contains(s, authToken) || !strings.Contains(s, "[redacted]") {
		t.Errorf("String() = %s: want the token redacted", s)
	}
}

func TestCallbackURLRoundTrip(t *testing.T) {
	u := twilio.CallbackURL("https://h.example/twilio", "01ABC")
	if u != "https://h.example/twilio?msgq_id=01ABC" || twilio.CallbackID(u) != "01ABC" {
		t.Errorf("CallbackURL = %q, CallbackID = %q", u, twilio.CallbackID(u))
	}
	if twilio.CallbackURL("", "x") != "" || twilio.CallbackID("https://h.example/") != "" {
		t.Error("no base, no callback; no msgq_id, no id")
	}
}
