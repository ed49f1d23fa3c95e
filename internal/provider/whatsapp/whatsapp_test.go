package whatsapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

const token = "EAAGsecret-token-value"

var now = time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)

// recorded is one request as the fake Graph API saw it.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// fakeGraph is a real HTTP server answering every request with status,
// headers and body, and recording what it received.
type fakeGraph struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFakeGraph(t *testing.T, status int, header http.Header, body string) *fakeGraph {
	t.Helper()
	f := &fakeGraph{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.EscapedPath(), r.Header.Clone(), b})
		f.mu.Unlock()
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeGraph) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeGraph) client(t *testing.T) *whatsapp.Client {
	t.Helper()
	return newClient(f.srv.URL, f.srv.Client())
}

func newClient(base string, hc *http.Client) *whatsapp.Client {
	return whatsapp.New(whatsapp.Config{
		BaseURL:       base,
		PhoneNumberID: "106540352242922",
		Token:         token,
		HTTPClient:    hc,
		Now:           func() time.Time { return now },
	})
}

func templateMessage() *provider.Message {
	return &provider.Message{
		ID:      "01JC8Z5W3Q4Y7R2B6N9M0K1P2S",
		Key:     "order-42-ready",
		To:      "+15551230042",
		Channel: store.ChannelWhatsApp,
		Payload: store.Payload{Template: "order_ready", Lang: "en_US", Params: []string{"Dana", "#42"}},
	}
}

const successBody = `{"messaging_product":"whatsapp","contacts":[{"input":"+15551230042","wa_id":"15551230042"}],` +
	`"messages":[{"id":"wamid.HBgLMTU1NTEyMzAwNDIVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA","message_status":"accepted"}]}`

func metaError(code int, subcode int) string {
	return fmt.Sprintf(`{"error":{"message":"(#%d) something","type":"OAuthException","code":%d,`+
		`"error_subcode":%d,"error_data":{"messaging_product":"whatsapp","details":"details for people"},`+
		`"fbtrace_id":"AbCdEf123"}}`, code, code, subcode)
}

func TestSendTemplateRequestShape(t *testing.T) {
	t.Parallel()
	f := newFakeGraph(t, http.StatusOK, nil, successBody)
	res := f.client(t).Send(context.Background(), templateMessage())
	if res.Class != retry.Accepted {
		t.Fatalf("class = %q (%s), want accepted", res.Class, res.RawError)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/v21.0/106540352242922/messages" {
		t.Errorf("%s %s; want POST /v21.0/106540352242922/messages", r.Method, r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization = %q", got)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	for _, h := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		// net/http re-sends requests carrying these on a dropped
		// keep-alive connection; Meta would not deduplicate.
		if r.Header.Get(h) != "" {
			t.Errorf("request carries %s; Meta has no idempotency key", h)
		}
	}
	want := `{"messaging_product":"whatsapp","recipient_type":"individual","to":"+15551230042",` +
		`"type":"template","template":{"name":"order_ready","language":{"code":"en_US"},` +
		`"components":[{"type":"body","parameters":[{"type":"text","text":"Dana"},{"type":"text","text":"#42"}]}]},` +
		`"biz_opaque_callback_data":"01JC8Z5W3Q4Y7R2B6N9M0K1P2S"}`
	assertJSONEqual(t, r.Body, want)
	if bytes.HasSuffix(r.Body, []byte("\n")) {
		t.Errorf("body ends in a newline")
	}
}

func TestSendTemplateWithoutParamsHasNoComponents(t *testing.T) {
	t.Parallel()
	f := newFakeGraph(t, http.StatusOK, nil, successBody)
	m := templateMessage()
	m.Payload.Params = nil
	f.client(t).Send(context.Background(), m)
	assertJSONEqual(t, f.requests()[0].Body, `{"messaging_product":"whatsapp","recipient_type":"individual",`+
		`"to":"+15551230042","type":"template","template":{"name":"order_ready","language":{"code":"en_US"}},`+
		`"biz_opaque_callback_data":"01JC8Z5W3Q4Y7R2B6N9M0K1P2S"}`)
}

func TestSendTextRequestShape(t *testing.T) {
	t.Parallel()
	f := newFakeGraph(t, http.StatusOK, nil, successBody)
	m := templateMessage()
	m.Payload = store.Payload{Text: "Your order <42> & more is ready"}
	f.client(t).Send(context.Background(), m)
	assertJSONEqual(t, f.requests()[0].Body, `{"messaging_product":"whatsapp","recipient_type":"individual",`+
		`"to":"+15551230042","type":"text","text":{"body":"Your order <42> & more is ready"},`+
		`"biz_opaque_callback_data":"01JC8Z5W3Q4Y7R2B6N9M0K1P2S"}`)
}

func TestSendBaseURLAndVersionAreConfigurable(t *testing.T) {
	t.Parallel()
	f := newFakeGraph(t, http.StatusOK, nil, successBody)
	c := whatsapp.New(whatsapp.Config{BaseURL: f.srv.URL + "/graph/", APIVersion: "v23.0",
		PhoneNumberID: "42", Token: token, HTTPClient: f.srv.Client()})
	c.Send(context.Background(), templateMessage())
	if got := f.requests()[0].Path; got != "/graph/v23.0/42/messages" {
		t.Errorf("path = %q, want /graph/v23.0/42/messages", got)
	}
}

func TestSendSuccessGivesTheWamid(t *testing.T) {
	t.Parallel()
	f := newFakeGraph(t, http.StatusOK, nil, successBody)
	res := f.client(t).Send(context.Background(), templateMessage())
	want := provider.Result{Class: retry.Accepted, HTTPStatus: 200,
		ProviderID: "wamid.HBgLMTU1NTEyMzAwNDIVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"}
	if res != want {
		t.Errorf("Send = %+v, want %+v", res, want)
	}
}

// The table of docs/providers.md, code by code. Each code is sent with a 4xx and
// a 5xx status: the class must come from the code alone.
var documentedCodes = []struct {
	codes []int
	class retry.Class
	delay time.Duration
}{
	{[]int{0, 190}, retry.Identity, 0},
	{[]int{3, 10, 200, 250, 299, 131005}, retry.Identity, 0},
	{[]int{133010}, retry.Identity, 0},
	{[]int{368, 131031, 130497}, retry.Identity, 0},
	{[]int{131042}, retry.Identity, 0},
	{[]int{4, 80007, 130429}, retry.RateLimited, 0},
	{[]int{131056}, retry.RateLimited, whatsapp.PairRateLimitDelay},
	{[]int{131048}, retry.RateLimited, whatsapp.SpamRateLimitDelay},
	{[]int{131049}, retry.RateLimited, 24 * time.Hour},
	{[]int{131047}, retry.Permanent, 0},
	{[]int{131026}, retry.Permanent, 0},
	{[]int{131050}, retry.Permanent, 0},
	{[]int{130403}, retry.Permanent, 0},
	{[]int{131051, 131053, 100, 131008, 131009}, retry.Permanent, 0},
	{[]int{132000, 132001, 132005, 132007, 132012, 132015, 132016}, retry.Permanent, 0},
	{[]int{131000, 131016, 2, 133004, 131057}, retry.Transient, 0},
	{[]int{1}, retry.Ambiguous, 0},
}

func TestSendClassifiesEveryDocumentedCode(t *testing.T) {
	t.Parallel()
	for _, row := range documentedCodes {
		for _, code := range row.codes {
			for _, status := range []int{http.StatusBadRequest, http.StatusInternalServerError} {
				t.Run(fmt.Sprintf("code %d with HTTP %d is %s", code, status, row.class), func(t *testing.T) {
					t.Parallel()
					body := metaError(code, 2494010)
					f := newFakeGraph(t, status, nil, body)
					res := f.client(t).Send(context.Background(), templateMessage())
					want := provider.Result{Class: row.class, HTTPStatus: status, Code: fmt.Sprint(code),
						Subcode: "2494010", RawError: body, RetryAfter: row.delay,
						RecipientOnly: code == 131056, // the pair limit slows that recipient only
						WindowClosed:  code == 131047} // a text refused: a fallback template may go
					if res != want {
						t.Errorf("Send =\n %+v\nwant\n %+v", res, want)
					}
					class, delay, known := whatsapp.CodeClass(int64(code))
					if !known || class != row.class || delay != row.delay {
						t.Errorf("CodeClass(%d) = %q, %v, %v", code, class, delay, known)
					}
				})
			}
		}
	}
}

func TestSendUnknownCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		want   retry.Class
	}{
		{"with HTTP 400 is permanent: Meta processed and refused it", 400, retry.Permanent},
		{"with HTTP 403 is permanent", 403, retry.Permanent},
		{"with HTTP 401 is identity", 401, retry.Identity},
		{"with HTTP 429 is rate limited", 429, retry.RateLimited},
		{"with HTTP 500 is ambiguous", 500, retry.Ambiguous},
		{"with HTTP 503 is ambiguous", 503, retry.Ambiguous},
		{"with HTTP 200 is permanent", 200, retry.Permanent},
	} {
		t.Run("an unknown code "+tc.name, func(t *testing.T) {
			t.Parallel()
			body := `{"error":{"message":"new","type":"OAuthException","code":139999,"fbtrace_id":"x"}}`
			f := newFakeGraph(t, tc.status, nil, body)
			res := f.client(t).Send(context.Background(), templateMessage())
			if res.Class != tc.want || res.Code != "139999" || res.Subcode != "" || res.RawError != body {
				t.Errorf("Send = %+v; want class %q, code 139999, no subcode, the body verbatim", res, tc.want)
			}
		})
	}
}

func TestSendAnswersWithoutAMetaErrorBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   retry.Class
	}{
		{"a 502 HTML page from a gateway is ambiguous", 502, "<html><body>Bad Gateway</body></html>", retry.Ambiguous},
		{"an empty 504 is ambiguous", 504, "", retry.Ambiguous},
		{"a 500 with someone else's JSON is ambiguous", 500, `{"message":"internal error"}`, retry.Ambiguous},
		{"a 500 whose error has no code is ambiguous", 500, `{"error":{"message":"oops"}}`, retry.Ambiguous},
		{"an empty 429 is rate limited", 429, "", retry.RateLimited},
		{"a 200 with garbage is ambiguous: it may have been accepted", 200, "garbage<<", retry.Ambiguous},
		{"a 200 without a message id is ambiguous", 200, `{"messaging_product":"whatsapp","messages":[]}`, retry.Ambiguous},
		{"a 400 with garbage is ambiguous", 400, "garbage<<", retry.Ambiguous},
		{"a 404 from a proxy is ambiguous", 404, "not found", retry.Ambiguous},
		{"a redirect is not followed and is ambiguous", 307, "", retry.Ambiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tc.status == 307 {
				h.Set("Location", "/elsewhere")
			}
			f := newFakeGraph(t, tc.status, h, tc.body)
			res := f.client(t).Send(context.Background(), templateMessage())
			want := provider.Result{Class: tc.want, HTTPStatus: tc.status, RawError: tc.body}
			if res != want {
				t.Errorf("Send = %+v, want %+v", res, want)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests reached the server, want 1", n)
			}
		})
	}
}

func TestSendRetryAfter(t *testing.T) {
	t.Parallel()
	t.Run("a 429 without a body takes the header's seconds", func(t *testing.T) {
		t.Parallel()
		f := newFakeGraph(t, 429, http.Header{"Retry-After": {"30"}}, "")
		res := f.client(t).Send(context.Background(), templateMessage())
		if res.Class != retry.RateLimited || res.RetryAfter != 30*time.Second {
			t.Errorf("Send = %+v; want rate_limited after 30s", res)
		}
	})
	t.Run("a 429 takes an HTTP date relative to the configured clock", func(t *testing.T) {
		t.Parallel()
		h := http.Header{"Retry-After": {now.Add(2 * time.Minute).Format(http.TimeFormat)}}
		f := newFakeGraph(t, 429, h, "")
		res := f.client(t).Send(context.Background(), templateMessage())
		if res.Class != retry.RateLimited || res.RetryAfter != 2*time.Minute {
			t.Errorf("Send = %+v; want rate_limited after 2m", res)
		}
	})
	t.Run("a longer header wins over a code's delay", func(t *testing.T) {
		t.Parallel()
		f := newFakeGraph(t, 400, http.Header{"Retry-After": {"60"}}, metaError(131056, 0))
		res := f.client(t).Send(context.Background(), templateMessage())
		if res.Class != retry.RateLimited || res.RetryAfter != time.Minute {
			t.Errorf("Send = %+v; want rate_limited after 1m", res)
		}
	})
	t.Run("a longer code delay wins over the header", func(t *testing.T) {
		t.Parallel()
		f := newFakeGraph(t, 400, http.Header{"Retry-After": {"60"}}, metaError(131049, 0))
		res := f.client(t).Send(context.Background(), templateMessage())
		if res.Class != retry.RateLimited || res.RetryAfter != 24*time.Hour {
			t.Errorf("Send = %+v; want rate_limited after 24h", res)
		}
	})
}

func TestSendRefusesAnEmptyPayloadWithoutACall(t *testing.T) {
	t.Parallel()
	f := newFakeGraph(t, http.StatusOK, nil, successBody)
	m := templateMessage()
	m.Payload = store.Payload{}
	res := f.client(t).Send(context.Background(), m)
	if res.Class != retry.Permanent || !strings.Contains(res.RawError, "neither a template nor text") {
		t.Errorf("Send = %+v; want permanent naming the problem", res)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests were made", n)
	}
}

func TestSendMisconfiguredIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  whatsapp.Config
	}{
		{"no phone number id", whatsapp.Config{Token: token}},
		{"a base URL that is not http", whatsapp.Config{BaseURL: "ftp://graph.example", PhoneNumberID: "1", Token: token}},
	} {
		t.Run(tc.name+" pauses the identity", func(t *testing.T) {
			t.Parallel()
			res := whatsapp.New(tc.cfg).Send(context.Background(), templateMessage())
			if res.Class != retry.Identity || !strings.Contains(res.RawError, "misconfigured") {
				t.Errorf("Send = %+v; want identity", res)
			}
			if strings.Contains(res.RawError, token) {
				t.Errorf("RawError carries the token")
			}
		})
	}
}

func TestSendTransportFailures(t *testing.T) {
	t.Parallel()
	t.Run("a connection dropped after the request is ambiguous", func(t *testing.T) {
		t.Parallel()
		var got atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			got.Add(1)
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}))
		t.Cleanup(srv.Close)
		res := newClient(srv.URL, srv.Client()).Send(context.Background(), templateMessage())
		if res.Class != retry.Ambiguous || res.HTTPStatus != 0 || res.RawError == "" {
			t.Errorf("Send = %+v; want ambiguous with the error", res)
		}
		if strings.Contains(res.RawError, token) {
			t.Errorf("RawError carries the token: %q", res.RawError)
		}
		if got.Load() != 1 {
			t.Errorf("server got %d requests, want 1", got.Load())
		}
	})
	t.Run("a closed port is transient", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		res := newClient("http://"+addr, nil).Send(context.Background(), templateMessage())
		if res.Class != retry.Transient || !strings.Contains(res.RawError, "refused") {
			t.Errorf("Send = %+v; want transient with the dial error", res)
		}
	})
	t.Run("a response slower than the deadline is ambiguous", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // so the server notices the client leaving
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			io.WriteString(w, successBody)
		}))
		t.Cleanup(srv.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		res := newClient(srv.URL, srv.Client()).Send(ctx, templateMessage())
		if res.Class != retry.Ambiguous || !strings.Contains(res.RawError, "deadline") {
			t.Errorf("Send = %+v; want ambiguous with the deadline error", res)
		}
	})
}

// net/http silently re-sends a request on a reused keep-alive connection
// that died before the answer, when it thinks the request is idempotent.
// A WhatsApp send must never be re-sent that way.
func TestSendIsNotResentOnADroppedKeepAliveConnection(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	var mu sync.Mutex
	var remotes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		mu.Unlock()
		if got.Add(1) == 1 {
			io.WriteString(w, successBody) // keeps the connection alive
			return
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	c := newClient(srv.URL, srv.Client())

	if res := c.Send(context.Background(), templateMessage()); res.Class != retry.Accepted {
		t.Fatalf("first Send = %+v", res)
	}
	res := c.Send(context.Background(), templateMessage())
	if res.Class != retry.Ambiguous {
		t.Errorf("second Send = %+v; want ambiguous", res)
	}
	if got.Load() != 2 {
		t.Errorf("server got %d requests for 2 sends", got.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) < 2 || remotes[0] != remotes[1] {
		t.Errorf("the second send did not reuse the connection (%v): the test proves nothing", remotes)
	}
}

func TestTheTokenIsNeverPrinted(t *testing.T) {
	t.Parallel()
	cfg := whatsapp.Config{PhoneNumberID: "1", Token: token}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "cfg", cfg)
	for _, s := range []string{
		fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg),
		fmt.Sprint(whatsapp.New(cfg)), logged.String(),
	} {
		if strings.Contains(s, token) {
			t.Errorf("printed the token: %s", s)
		}
		if !strings.Contains(s, "redacted") {
			t.Errorf("printed without the redaction marker: %s", s)
		}
	}
}

func TestNotIdempotent(t *testing.T) {
	t.Parallel()
	if whatsapp.New(whatsapp.Config{}).Idempotent() {
		t.Error("Idempotent() = true; the Cloud API has no idempotency key")
	}
}

func assertJSONEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("request body is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("request body\n got %s\nwant %s", gb, wb)
	}
}
