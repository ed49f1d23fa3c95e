package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/sim"
)

// fixedNow has nanoseconds, so the JSON stamp shows they survive.
var fixedNow = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.UTC)

func cfgWith(f func(*sim.Config)) sim.Config {
	c := sim.DefaultConfig()
	c.Now = func() time.Time { return fixedNow }
	if f != nil {
		f(&c)
	}
	return c
}

func serve(t *testing.T, cfg sim.Config) (*sim.Sim, *httptest.Server) {
	t.Helper()
	s := sim.New(cfg)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv
}

// freshClient uses a new connection for every request, so the Transport
// never replays a request on its own (see TestTransportReplaysDroppedPOST).
func freshClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// post sends body with a bearer token (unless token is "") and the key (unless "").
func post(c *http.Client, url, token, key, body string) (*reply, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &reply{resp.StatusCode, resp.Header, b}, nil
}

func mustPost(t *testing.T, url, key, body string) *reply {
	t.Helper()
	r, err := post(freshClient(10*time.Second), url, "tok", key, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func httpMsg(ref, to, text string) string {
	b, _ := json.Marshal(map[string]any{"ref": ref, "to": to, "channel": "sms", "text": text})
	return string(b)
}

func waMsg(ref, to string) string {
	b, _ := json.Marshal(map[string]any{
		"messaging_product": "whatsapp", "recipient_type": "individual", "to": to, "type": "template",
		"template":                 map[string]any{"name": "order_update", "language": map[string]string{"code": "en_US"}},
		"biz_opaque_callback_data": ref,
	})
	return string(b)
}

func deliveries(t *testing.T, base string) []sim.Delivery {
	t.Helper()
	resp, err := http.Get(base + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ds []sim.Delivery
	if err := json.NewDecoder(resp.Body).Decode(&ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

// httpErrBody is the http API's error body.
type httpErrBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable *bool  `json:"retryable"`
	} `json:"error"`
}

func decodeHTTPErr(t *testing.T, b []byte) httpErrBody {
	t.Helper()
	var e httpErrBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	if e.Error.Code == "" || e.Error.Message == "" || e.Error.Retryable == nil {
		t.Fatalf("error body %s: want code, message and retryable", b)
	}
	return e
}

// waErrBody is Meta's error body.
type waErrBody struct {
	Error struct {
		Message   string `json:"message"`
		Type      string `json:"type"`
		Code      int    `json:"code"`
		ErrorData struct {
			MessagingProduct string `json:"messaging_product"`
			Details          string `json:"details"`
		} `json:"error_data"`
		FBTraceID string `json:"fbtrace_id"`
	} `json:"error"`
}

func decodeWAErr(t *testing.T, b []byte) waErrBody {
	t.Helper()
	var e waErrBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	if e.Error.Code == 0 || e.Error.Message == "" || e.Error.Type == "" || e.Error.FBTraceID == "" {
		t.Fatalf("error body %s: want message, type, code and fbtrace_id", b)
	}
	return e
}
