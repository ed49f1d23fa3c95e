package httpapi_test

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
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

const token = "sk_live_secret-token-value"

var now = time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)

type recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// fakeAPI is a real HTTP server answering every request with status,
// headers and body, and recording what it received.
type fakeAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFakeAPI(t *testing.T, status int, header http.Header, body string) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
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

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeAPI) client() *httpapi.Client { return newClient(f.srv.URL, f.srv.Client()) }

func newClient(base string, hc *http.Client) *httpapi.Client {
	return httpapi.New(httpapi.Config{BaseURL: base, Token: token, HTTPClient: hc,
		Now: func() time.Time { return now }})
}

func message() *provider.Message {
	return &provider.Message{
		ID:      "01JC8Z5W3Q4Y7R2B6N9M0K1P2S",
		Key:     "order-42:ready_v1.0",
		To:      "+15551230042",
		Channel: store.ChannelWhatsApp,
		Payload: store.Payload{Template: "order_ready", Lang: "en_US", Params: []string{"Dana", "#42"}},
	}
}

func send(t *testing.T, f *fakeAPI) provider.Result {
	t.Helper()
	return f.client().Send(context.Background(), message())
}

func TestSendRequestShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		payload store.Payload
		want    string
	}{
		{"a template carries name, lang and params",
			store.Payload{Template: "order_ready", Lang: "en_US", Params: []string{"Dana", "#42"}, Text: "ignored"},
			`{"ref":"01JC8Z5W3Q4Y7R2B6N9M0K1P2S","to":"+15551230042","channel":"whatsapp",` +
				`"template":{"name":"order_ready","lang":"en_US","params":["Dana","#42"]}}`},
		{"a template without params sends an empty array",
			store.Payload{Template: "hello", Lang: "en"},
			`{"ref":"01JC8Z5W3Q4Y7R2B6N9M0K1P2S","to":"+15551230042","channel":"whatsapp",` +
				`"template":{"name":"hello","lang":"en","params":[]}}`},
		{"text is sent as text",
			store.Payload{Text: "Your order is ready"},
			`{"ref":"01JC8Z5W3Q4Y7R2B6N9M0K1P2S","to":"+15551230042","channel":"whatsapp",` +
				`"text":"Your order is ready"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, http.StatusAccepted, nil, `{"id":"msg_1","status":"accepted"}`)
			m := message()
			m.Payload = tc.payload
			if res := f.client().Send(context.Background(), m); res.Class != retry.Accepted {
				t.Fatalf("Send = %+v", res)
			}
			r := f.requests()[0]
			if r.Method != http.MethodPost || r.Path != "/v1/messages" {
				t.Errorf("%s %s; want POST /v1/messages", r.Method, r.Path)
			}
			for h, want := range map[string]string{
				"Idempotency-Key": "order-42:ready_v1.0",
				"Authorization":   "Bearer " + token,
				"Content-Type":    "application/json",
			} {
				if got := r.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			assertJSONEqual(t, r.Body, tc.want)
		})
	}
}

func TestSendBaseURLWithAPathAndATrailingSlash(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, http.StatusAccepted, nil, `{"id":"msg_1","status":"accepted"}`)
	c := httpapi.New(httpapi.Config{BaseURL: f.srv.URL + "/api/", Token: token, HTTPClient: f.srv.Client()})
	c.Send(context.Background(), message())
	if got := f.requests()[0].Path; got != "/api/v1/messages" {
		t.Errorf("path = %q, want /api/v1/messages", got)
	}
}

// TestSendBaseURLEndingInTheAPIVersionIsTheSameAPI pins issue 13: the
// README's base_url: https://api.example.com/v1 posted to /v1/v1/messages.
func TestSendBaseURLEndingInTheAPIVersionIsTheSameAPI(t *testing.T) {
	t.Parallel()
	for base, want := range map[string]string{"/v1": "/v1/messages", "/v1/": "/v1/messages", "/api/v1": "/api/v1/messages", "/v10": "/v10/v1/messages"} {
		f := newFakeAPI(t, http.StatusAccepted, nil, `{"id":"msg_1","status":"accepted"}`)
		c := httpapi.New(httpapi.Config{BaseURL: f.srv.URL + base, Token: token, HTTPClient: f.srv.Client()})
		c.Send(context.Background(), message())
		if got := f.requests()[0].Path; got != want {
			t.Errorf("base %q: path = %q, want %q", base, got, want)
		}
	}
}

func TestSendAnswers(t *testing.T) {
	t.Parallel()
	replayed := http.Header{"Idempotent-Replayed": {"true"}}
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
		want   provider.Result // RawError is checked separately
	}{
		{"202 is accepted and new", 202, nil, `{"id":"msg_01","status":"accepted"}`,
			provider.Result{Class: retry.Accepted, HTTPStatus: 202, ProviderID: "msg_01"}},
		{"200 replayed is accepted and marked replayed", 200, replayed, `{"id":"msg_01","status":"accepted"}`,
			provider.Result{Class: retry.Accepted, HTTPStatus: 200, ProviderID: "msg_01", Replayed: true}},
		{"200 without the replay header is accepted, not replayed", 200, nil, `{"id":"msg_01","status":"accepted"}`,
			provider.Result{Class: retry.Accepted, HTTPStatus: 200, ProviderID: "msg_01"}},
		{"a 2xx without an id is ambiguous", 202, nil, `{"status":"accepted"}`,
			provider.Result{Class: retry.Ambiguous, HTTPStatus: 202}},
		{"a 200 captive-portal page is ambiguous", 200, nil, `<html>login</html>`,
			provider.Result{Class: retry.Ambiguous, HTTPStatus: 200}},
		{"409 idempotency_key_reused is permanent", 409, nil,
			`{"error":{"code":"idempotency_key_reused","message":"same key, other body"}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 409, Code: "idempotency_key_reused"}},
		{"409 idempotency_key_reused is permanent even when flagged retryable", 409, nil,
			`{"error":{"code":"idempotency_key_reused","retryable":true}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 409, Code: "idempotency_key_reused"}},
		{"a 5xx is transient", 500, nil, `{"error":{"code":"internal","message":"boom"}}`,
			provider.Result{Class: retry.Transient, HTTPStatus: 500, Code: "internal"}},
		{"a 502 without a body is transient: the key makes a retry safe", 502, nil, ``,
			provider.Result{Class: retry.Transient, HTTPStatus: 502}},
		{"a 503 keeps its Retry-After", 503, http.Header{"Retry-After": {"7"}}, ``,
			provider.Result{Class: retry.Transient, HTTPStatus: 503, RetryAfter: 7 * time.Second}},
		{"a 408 is transient", 408, nil, ``,
			provider.Result{Class: retry.Transient, HTTPStatus: 408}},
		{"retryable false wins over a 5xx", 503, nil, `{"error":{"code":"bad_template","retryable":false}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 503, Code: "bad_template"}},
		{"retryable true wins over a 4xx", 400, nil, `{"error":{"code":"upstream_busy","retryable":true}}`,
			provider.Result{Class: retry.Transient, HTTPStatus: 400, Code: "upstream_busy"}},
		{"retryable true on a 429 stays rate limited", 429, http.Header{"Retry-After": {"3"}},
			`{"error":{"code":"slow_down","retryable":true}}`,
			provider.Result{Class: retry.RateLimited, HTTPStatus: 429, Code: "slow_down", RetryAfter: 3 * time.Second}},
		{"retryable false on a 429 is permanent", 429, nil, `{"error":{"code":"quota_gone","retryable":false}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 429, Code: "quota_gone"}},
		{"window_closed is permanent", 422, nil, `{"error":{"code":"window_closed","message":"24h window closed"}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 422, Code: "window_closed", WindowClosed: true}},
		{"consent_required on a 403 is permanent, not identity", 403, nil,
			`{"error":{"code":"consent_required","retryable":false}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 403, Code: "consent_required"}},
		{"401 is identity", 401, nil, `{"error":{"code":"invalid_token"}}`,
			provider.Result{Class: retry.Identity, HTTPStatus: 401, Code: "invalid_token"}},
		{"401 is identity even when flagged retryable", 401, nil, `{"error":{"code":"token_expired","retryable":true}}`,
			provider.Result{Class: retry.Identity, HTTPStatus: 401, Code: "token_expired"}},
		{"403 without a flag is identity", 403, nil, `{"error":{"code":"account_suspended"}}`,
			provider.Result{Class: retry.Identity, HTTPStatus: 403, Code: "account_suspended"}},
		{"another 4xx is permanent", 400, nil, `{"error":{"code":"invalid_recipient","message":"bad to"}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 400, Code: "invalid_recipient"}},
		{"a numeric code is copied as its text", 400, nil, `{"error":{"code":21211}}`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 400, Code: "21211"}},
		{"a 4xx with garbage is permanent by status", 404, nil, `nope`,
			provider.Result{Class: retry.Permanent, HTTPStatus: 404}},
		{"a redirect is not followed and is ambiguous", 308, http.Header{"Location": {"/elsewhere"}}, ``,
			provider.Result{Class: retry.Ambiguous, HTTPStatus: 308}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, tc.status, tc.header, tc.body)
			res := send(t, f)
			want := tc.want
			if want.Class != retry.Accepted {
				want.RawError = tc.body
			}
			if res != want {
				t.Errorf("Send =\n %+v\nwant\n %+v", res, want)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests reached the server, want 1", n)
			}
		})
	}
}

func TestSend429RetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header string
		want         time.Duration
	}{
		{"in seconds", "120", 2 * time.Minute},
		{"as an HTTP date relative to the configured clock", now.Add(45 * time.Second).Format(http.TimeFormat), 45 * time.Second},
		{"missing", "", 0},
	} {
		t.Run("a 429 with Retry-After "+tc.name+" is rate limited", func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tc.header != "" {
				h.Set("Retry-After", tc.header)
			}
			f := newFakeAPI(t, 429, h, "")
			res := send(t, f)
			if res.Class != retry.RateLimited || res.RetryAfter != tc.want || res.HTTPStatus != 429 {
				t.Errorf("Send = %+v; want rate_limited after %v", res, tc.want)
			}
		})
	}
}

func TestSendRefusesLocallyWithoutACall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*provider.Message)
		want   string
	}{
		{"an empty key", func(m *provider.Message) { m.Key = "" }, "Idempotency-Key"},
		{"a key with a slash", func(m *provider.Message) { m.Key = "order/42" }, "Idempotency-Key"},
		{"a key of 65 characters", func(m *provider.Message) { m.Key = strings.Repeat("k", 65) }, "Idempotency-Key"},
		{"a payload with neither template nor text", func(m *provider.Message) { m.Payload = store.Payload{} }, "neither"},
	} {
		t.Run(tc.name+" is permanent", func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, 202, nil, `{"id":"msg_1"}`)
			m := message()
			tc.change(m)
			res := f.client().Send(context.Background(), m)
			if res.Class != retry.Permanent || !strings.Contains(res.RawError, tc.want) {
				t.Errorf("Send = %+v; want permanent mentioning %q", res, tc.want)
			}
			if n := len(f.requests()); n != 0 {
				t.Errorf("%d requests were made", n)
			}
		})
	}
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"a": true, strings.Repeat("Z", 64): true, "AZaz09._:-": true,
		"": false, strings.Repeat("Z", 65): false, "a b": false, "ü": false, "a/b": false,
	} {
		if got := httpapi.ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestSendMisconfiguredBaseURLIsIdentity(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "api.example.com", "ftp://api.example.com"} {
		res := newClient(base, nil).Send(context.Background(), message())
		if res.Class != retry.Identity || !strings.Contains(res.RawError, "misconfigured") {
			t.Errorf("base %q: Send = %+v; want identity", base, res)
		}
	}
}

func TestSendTransportFailures(t *testing.T) {
	t.Parallel()
	t.Run("a timeout after the request is still reported ambiguous", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}))
		t.Cleanup(srv.Close)
		hc := srv.Client()
		hc.Timeout = 100 * time.Millisecond
		res := newClient(srv.URL, hc).Send(context.Background(), message())
		if res.Class != retry.Ambiguous || res.RawError == "" || strings.Contains(res.RawError, token) {
			t.Errorf("Send = %+v; want ambiguous with the error and no token", res)
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
		res := newClient("http://"+addr, nil).Send(context.Background(), message())
		if res.Class != retry.Transient || !strings.Contains(res.RawError, "refused") {
			t.Errorf("Send = %+v; want transient with the dial error", res)
		}
	})
}

// The retry table's view: an ambiguous answer from this provider is retried
// with the same key, and the replay is recognised as the earlier success.
func TestAnAmbiguousSendRetriedWithTheSameKeyIsReplayed(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	keys := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		keys <- r.Header.Get("Idempotency-Key")
		if calls.Add(1) == 1 {
			conn, _, _ := w.(http.Hijacker).Hijack() // accepted, then the answer is lost
			conn.Close()
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		io.WriteString(w, `{"id":"msg_7","status":"accepted"}`)
	}))
	t.Cleanup(srv.Close)
	// A fresh connection per call, so net/http's own same-key re-send of a
	// reused connection does not hide the lost answer.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	c := newClient(srv.URL, hc)

	first := c.Send(context.Background(), message())
	if first.Class != retry.Ambiguous || !c.Idempotent() {
		t.Fatalf("first Send = %+v, Idempotent %v; want ambiguous from an idempotent provider", first, c.Idempotent())
	}
	d := retry.Table{Policy: retry.DefaultPolicy(), Now: func() time.Time { return now }, Rand: func() float64 { return 0.5 }}.
		Decide(retry.Outcome{Class: first.Class, Idempotent: c.Idempotent()}, 1, time.Time{})
	if d.Action != retry.Requeue {
		t.Fatalf("retry table decided %q for the ambiguous send, want requeue", d.Action)
	}
	second := c.Send(context.Background(), message())
	if second.Class != retry.Accepted || !second.Replayed || second.ProviderID != "msg_7" {
		t.Errorf("second Send = %+v; want accepted, replayed, msg_7", second)
	}
	if k1, k2 := <-keys, <-keys; k1 != k2 || k1 != message().Key {
		t.Errorf("keys %q and %q; want the row's key twice", k1, k2)
	}
}

// net/http itself re-sends a request carrying an Idempotency-Key when a
// reused keep-alive connection dies before the answer. That is safe only
// because the server deduplicates by key, and it means one Send can reach
// the server twice: the simulator must count deliveries per key.
func TestNetHTTPResendsOnADroppedKeepAliveConnectionWithTheSameKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys, remotes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		remotes = append(remotes, r.RemoteAddr)
		n := len(keys)
		mu.Unlock()
		switch n {
		case 1:
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"id":"msg_1","status":"accepted"}`)
		case 2:
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			io.WriteString(w, `{"id":"msg_2","status":"accepted"}`)
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(srv.URL, srv.Client())

	m1 := message()
	if res := c.Send(context.Background(), m1); res.Class != retry.Accepted {
		t.Fatalf("first Send = %+v", res)
	}
	m2 := message()
	m2.Key = "order-43"
	res := c.Send(context.Background(), m2)
	if res.Class != retry.Accepted || !res.Replayed || res.ProviderID != "msg_2" {
		t.Errorf("second Send = %+v; want the re-sent request's replayed answer", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 3 || keys[1] != "order-43" || keys[2] != "order-43" || remotes[0] != remotes[1] {
		t.Errorf("server saw keys %v from %v; want the second key twice, first on the reused connection", keys, remotes)
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	t.Run("a found message gives its status", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, 200, nil, `{"id":"msg_01/x","status":"delivered"}`)
		status, res := f.client().Lookup(context.Background(), "msg_01/x")
		if status != "delivered" || res.Class != retry.Accepted || res.ProviderID != "msg_01/x" {
			t.Errorf("Lookup = %q, %+v; want delivered, accepted", status, res)
		}
		r := f.requests()[0]
		if r.Method != http.MethodGet || r.Path != "/v1/messages/msg_01%2Fx" {
			t.Errorf("%s %s; want GET /v1/messages/msg_01%%2Fx", r.Method, r.Path)
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
		}
	})
	t.Run("an unknown message is permanent", func(t *testing.T) {
		t.Parallel()
		body := `{"error":{"code":"not_found","message":"no such message"}}`
		f := newFakeAPI(t, 404, nil, body)
		status, res := f.client().Lookup(context.Background(), "msg_x")
		if status != "" || res.Class != retry.Permanent || res.Code != "not_found" || res.RawError != body {
			t.Errorf("Lookup = %q, %+v", status, res)
		}
	})
	t.Run("a 200 without a status is ambiguous", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, 200, nil, `{"id":"msg_01"}`)
		status, res := f.client().Lookup(context.Background(), "msg_01")
		if status != "" || res.Class != retry.Ambiguous {
			t.Errorf("Lookup = %q, %+v", status, res)
		}
	})
	t.Run("an empty id is refused without a call", func(t *testing.T) {
		t.Parallel()
		f := newFakeAPI(t, 200, nil, `{}`)
		if _, res := f.client().Lookup(context.Background(), ""); res.Class != retry.Permanent || len(f.requests()) != 0 {
			t.Errorf("Lookup(\"\") = %+v after %d calls", res, len(f.requests()))
		}
	})
}

func TestTheTokenIsNeverPrinted(t *testing.T) {
	t.Parallel()
	cfg := httpapi.Config{BaseURL: "https://api.example.com", Token: token}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", cfg)
	for _, s := range []string{
		fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg),
		fmt.Sprint(httpapi.New(cfg)), logged.String(),
	} {
		if strings.Contains(s, token) || !strings.Contains(s, "redacted") {
			t.Errorf("printed %s", s)
		}
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
