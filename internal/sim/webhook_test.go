package sim_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

const (
	appSecret = "sim-test-app-secret"
	phoneID   = "106540352242922"
)

func testSecret(t *testing.T, key string) verify.Secret {
	t.Helper()
	s, err := verify.ParseSecret("whsec_" + base64.StdEncoding.EncodeToString([]byte(key)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hook is one webhook request as received.
type hook struct {
	path   string
	header http.Header
	body   []byte
	answer int
}

// key names the webhook a request carries, the same on every retry of it:
// the webhook-id (http), else the body (WhatsApp resends the same bytes).
func (h *hook) key() string {
	if id := h.header.Get("webhook-id"); id != "" {
		return id
	}
	return string(h.body)
}

// receiver stands in for msgq webhook serve: it records every request and
// answers what answer says (nil: 200).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hooks  []hook
	seen   map[string]int
	answer func(h *hook, attempt int, r *http.Request) int
}

func newReceiver(t *testing.T, answer func(h *hook, attempt int, r *http.Request) int) *receiver {
	rc := &receiver{seen: map[string]int{}, answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		h := hook{path: r.URL.Path, header: r.Header.Clone(), body: body, answer: http.StatusOK}
		rc.mu.Lock()
		rc.seen[h.key()]++
		attempt := rc.seen[h.key()]
		rc.mu.Unlock()
		if rc.answer != nil {
			h.answer = rc.answer(&h, attempt, r)
		}
		rc.mu.Lock()
		rc.hooks = append(rc.hooks, h)
		rc.mu.Unlock()
		w.WriteHeader(h.answer)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) all() []hook {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.hooks)
}

// ok is the requests answered 200.
func (rc *receiver) ok() []hook {
	var out []hook
	for _, h := range rc.all() {
		if h.answer == http.StatusOK {
			out = append(out, h)
		}
	}
	return out
}

// serveHooks starts a simulator that posts its webhooks to rc.
func serveHooks(t *testing.T, rc *receiver, f func(*sim.Config)) (*sim.Sim, *httptest.Server) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.WebhookURL = rc.srv.URL
	cfg.StatusDelay = 20 * time.Millisecond
	cfg.WebhookBackoff = 5 * time.Millisecond
	if f != nil {
		f(&cfg)
	}
	s := sim.New(cfg)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(s.Close) // first: cleanups run last in, first out
	return s, srv
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// status is a webhook as msgq would read it: verified, then parsed.
type status struct {
	payload.Status
	webhookID string
}

// parse verifies h as msgq webhook serve does and parses its one status.
func parse(t *testing.T, h hook, secrets []verify.Secret) status {
	t.Helper()
	var b *payload.Batch
	var err error
	id := h.header.Get("webhook-id")
	switch h.path {
	case "/webhooks/http":
		if err := verify.Verify(id, h.header.Get("webhook-timestamp"), h.header.Get("webhook-signature"),
			h.body, time.Now(), 0, secrets...); err != nil {
			t.Fatalf("http webhook %s: %v", h.body, err)
		}
		b, err = payload.HTTP(h.body, id)
	case "/webhooks/whatsapp":
		if err := verify.WhatsApp(h.body, h.header.Get("X-Hub-Signature-256"), []byte(appSecret)); err != nil {
			t.Fatalf("whatsapp webhook %s: %v", h.body, err)
		}
		b, err = payload.WhatsApp(h.body)
	default:
		t.Fatalf("webhook to %s", h.path)
	}
	if err != nil {
		t.Fatalf("%s: %v", h.body, err)
	}
	if len(b.Statuses) != 1 || len(b.Inbound) != 0 || len(b.Invalid) != 0 || len(b.Ignored) != 0 {
		t.Fatalf("%s parses as %+v, want one status", h.body, b)
	}
	return status{b.Statuses[0], id}
}

// byID groups the statuses received (answered 200) by provider id.
func byID(t *testing.T, rc *receiver, secrets []verify.Secret) map[string][]status {
	t.Helper()
	out := map[string][]status{}
	for _, h := range rc.ok() {
		s := parse(t, h, secrets)
		out[s.ProviderID] = append(out[s.ProviderID], s)
	}
	return out
}

func states(ss []status) []state.State {
	var out []state.State
	for _, s := range ss {
		out = append(out, s.Status.Status)
	}
	slices.Sort(out)
	return out
}

func sorted(ss ...state.State) []state.State {
	slices.Sort(ss)
	return ss
}

// has says the received statuses include id's st.
func has(t *testing.T, rc *receiver, secrets []verify.Secret, id string, st state.State) bool {
	return slices.Contains(states(byID(t, rc, secrets)[id]), st)
}

func TestWebhooksHTTP(t *testing.T) {
	t.Parallel()
	old, cur := testSecret(t, "old-key"), testSecret(t, "new-key")
	rc := newReceiver(t, nil)
	s, srv := serveHooks(t, rc, func(c *sim.Config) {
		c.WebhookSecrets = []verify.Secret{old, cur}
		c.ReadAfter = 20 * time.Millisecond
	})
	if r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("REF1", "+15551234567", "hi")); r.status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.status, r.body)
	}
	// Neither a replay nor a reused key is a new message: no statuses.
	if r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("REF1", "+15551234567", "hi")); r.status != http.StatusOK {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("REF1", "+15551234567", "bye")); r.status != http.StatusConflict {
		t.Fatalf("reuse: %d %s", r.status, r.body)
	}
	if r := mustPost(t, srv.URL+"/v1/messages", "k2", httpMsg("REF2", "+15557654321", "hi")); r.status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.status, r.body)
	}
	// Verified with the new secret alone: a receiver that already rotated.
	only := []verify.Secret{cur}
	eventually(t, "msg_2 read", func() bool { return has(t, rc, only, "msg_2", state.Read) })
	eventually(t, "msg_1 read", func() bool { return has(t, rc, only, "msg_1", state.Read) })

	got := byID(t, rc, only)
	if len(got) != 2 {
		t.Fatalf("statuses for %d messages, want 2: %v", len(got), got)
	}
	ids := map[string]bool{}
	for id, ref := range map[string]string{"msg_1": "REF1", "msg_2": "REF2"} {
		if st := states(got[id]); !slices.Equal(st, sorted(state.Sent, state.Delivered, state.Read)) {
			t.Errorf("%s: statuses %v, want sent, delivered, read once each", id, st)
		}
		for _, s := range got[id] {
			if s.CallbackRef != ref || s.Provider != store.WebhookHTTP || s.PhoneNumberID != "" {
				t.Errorf("%s: %+v, want ref %s", id, s, ref)
			}
			if s.DedupeKey != "wh:"+s.webhookID || !strings.HasPrefix(s.webhookID, "evt_") || ids[s.webhookID] {
				t.Errorf("%s: webhook-id %q (dedupe key %q) not unique", id, s.webhookID, s.DedupeKey)
			}
			ids[s.webhookID] = true
		}
	}
	// Both secrets sign: a receiver still on the old one verifies too.
	for _, h := range rc.ok() {
		parse(t, h, []verify.Secret{old})
	}
	eventually(t, "the counters", func() bool { return s.WebhookStats() == sim.WebhookStats{Sent: 6} })
}

func TestWebhooksWhatsApp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	s, srv := serveHooks(t, rc, func(c *sim.Config) { c.AppSecret = []byte(appSecret) })
	// No webhook secret: the http API sends no webhooks.
	if r := mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("REF1", "+15551234567", "hi")); r.status != http.StatusAccepted {
		t.Fatalf("http send: %d %s", r.status, r.body)
	}
	if r := mustPost(t, srv.URL+"/v21.0/"+phoneID+"/messages", "", waMsg("REF2", "+15557654321")); r.status != http.StatusOK {
		t.Fatalf("whatsapp send: %d %s", r.status, r.body)
	}
	eventually(t, "wamid.2 delivered", func() bool { return has(t, rc, nil, "wamid.2", state.Delivered) })

	got := byID(t, rc, nil)
	if len(got) != 1 || !slices.Equal(states(got["wamid.2"]), sorted(state.Sent, state.Delivered)) {
		t.Fatalf("statuses %v, want wamid.2 sent and delivered (no read without ReadAfter)", got)
	}
	for _, st := range got["wamid.2"] {
		if st.CallbackRef != "REF2" || st.PhoneNumberID != phoneID || st.Provider != store.WebhookWhatsApp {
			t.Errorf("status %+v", st)
		}
	}
	for _, h := range rc.ok() {
		var env struct {
			Entry []struct {
				Changes []struct {
					Value struct {
						Statuses []map[string]any `json:"statuses"`
					} `json:"value"`
				} `json:"changes"`
			} `json:"entry"`
		}
		if err := json.Unmarshal(h.body, &env); err != nil {
			t.Fatal(err)
		}
		st := env.Entry[0].Changes[0].Value.Statuses[0]
		if st["recipient_id"] != "15557654321" {
			t.Errorf("recipient_id %v, want the digits without the plus", st["recipient_id"])
		}
		if ts, ok := st["timestamp"].(string); !ok || ts == "" {
			t.Errorf("timestamp %#v, want Unix seconds as a string", st["timestamp"])
		}
	}
	eventually(t, "the counters", func() bool { return s.WebhookStats() == sim.WebhookStats{Sent: 2} })
}

// TestWebhooksDroppedAnswer: a send whose answer the drop fault lost was
// accepted all the same, so its statuses come, with the callback ref by
// which msgq settles a message it marked unknown.
func TestWebhooksDroppedAnswer(t *testing.T) {
	t.Parallel()
	secret := testSecret(t, "key")
	rc := newReceiver(t, nil)
	_, srv := serveHooks(t, rc, func(c *sim.Config) {
		c.FaultDrop = 1
		c.AppSecret = []byte(appSecret)
		c.WebhookSecrets = []verify.Secret{secret}
	})
	c := freshClient(10 * time.Second)
	if r, err := post(c, srv.URL+"/v21.0/"+phoneID+"/messages", "tok", "", waMsg("REF1", "+15551234567")); err == nil {
		t.Fatalf("whatsapp send answered %d; want the connection dropped", r.status)
	}
	if r, err := post(c, srv.URL+"/v1/messages", "tok", "k2", httpMsg("REF2", "+15551234567", "hi")); err == nil {
		t.Fatalf("http send answered %d; want the connection dropped", r.status)
	}
	secrets := []verify.Secret{secret}
	eventually(t, "the statuses", func() bool {
		got := byID(t, rc, secrets)
		return len(states(got["wamid.1"])) == 2 && len(states(got["msg_2"])) == 2
	})
	for id, ref := range map[string]string{"wamid.1": "REF1", "msg_2": "REF2"} {
		for _, st := range byID(t, rc, secrets)[id] {
			if st.CallbackRef != ref {
				t.Errorf("%s: callback ref %q, want %q", id, st.CallbackRef, ref)
			}
		}
	}
}

// TestWebhooksOnlyForAccepted: refused calls send nothing.
func TestWebhooksOnlyForAccepted(t *testing.T) {
	t.Parallel()
	secret := testSecret(t, "key")
	rc := newReceiver(t, nil)
	_, srv := serveHooks(t, rc, func(c *sim.Config) {
		c.FaultPermanent, c.Fault5xx, c.Seed = 0.3, 0.3, 3
		c.WebhookSecrets = []verify.Secret{secret}
	})
	accepted := map[string]bool{}
	refused := 0
	for i := range 20 {
		ref := fmt.Sprintf("REF%d", i)
		r := mustPost(t, srv.URL+"/v1/messages", fmt.Sprintf("k%d", i), httpMsg(ref, "+15551234567", "hi"))
		switch r.status {
		case http.StatusAccepted:
			accepted[ref] = true
		case http.StatusUnprocessableEntity, http.StatusInternalServerError:
			refused++
		default:
			t.Fatalf("send: %d %s", r.status, r.body)
		}
	}
	if len(accepted) == 0 || refused == 0 {
		t.Fatalf("%d accepted, %d refused: the seed proves nothing", len(accepted), refused)
	}
	secrets := []verify.Secret{secret}
	eventually(t, "every accepted message delivered", func() bool {
		n := 0
		for _, ss := range byID(t, rc, secrets) {
			if slices.Contains(states(ss), state.Delivered) {
				n++
			}
		}
		return n == len(accepted)
	})
	for id, ss := range byID(t, rc, secrets) {
		if !accepted[ss[0].CallbackRef] {
			t.Errorf("%s (ref %s): statuses for a refused call", id, ss[0].CallbackRef)
		}
	}
}

// TestWebhooksRetried: a webhook answered 500 is tried again, with the same
// body and, for the http API, the same webhook-id, re-signed each time.
func TestWebhooksRetried(t *testing.T) {
	t.Parallel()
	secret := testSecret(t, "key")
	rc := newReceiver(t, func(_ *hook, attempt int, _ *http.Request) int {
		if attempt <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	s, srv := serveHooks(t, rc, func(c *sim.Config) {
		c.AppSecret = []byte(appSecret)
		c.WebhookSecrets = []verify.Secret{secret}
	})
	mustPost(t, srv.URL+"/v1/messages", "k1", httpMsg("REF1", "+15551234567", "hi"))
	mustPost(t, srv.URL+"/v21.0/"+phoneID+"/messages", "", waMsg("REF2", "+15557654321"))
	secrets := []verify.Secret{secret}
	eventually(t, "the statuses", func() bool {
		got := byID(t, rc, secrets)
		return len(got["msg_1"]) == 2 && len(got["wamid.2"]) == 2
	})
	attempts := map[string]int{}
	for _, h := range rc.all() {
		parse(t, h, secrets) // every attempt is signed
		attempts[h.key()]++
	}
	if len(attempts) != 4 {
		t.Fatalf("%d distinct webhooks, want 4 (2 messages x sent, delivered)", len(attempts))
	}
	for k, n := range attempts {
		if n != 3 {
			t.Errorf("webhook %.60s: %d attempts, want 3", k, n)
		}
	}
	eventually(t, "the counters", func() bool { return s.WebhookStats() == sim.WebhookStats{Sent: 4, Retried: 8} })
}

// TestWebhooksGiveUp: after the last attempt a webhook is dropped and
// logged, without its secret.
func TestWebhooksGiveUp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(*hook, int, *http.Request) int { return http.StatusServiceUnavailable })
	// Nothing listens here: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	for _, target := range []string{rc.srv.URL, closed} {
		var logs syncBuf
		s := sim.New(func() sim.Config {
			c := sim.DefaultConfig()
			c.WebhookURL, c.AppSecret, c.StatusDelay, c.WebhookBackoff = target, []byte(appSecret), time.Millisecond, time.Millisecond
			c.Log = slog.New(slog.NewTextHandler(&logs, nil))
			return c
		}())
		srv := httptest.NewServer(s.Handler())
		mustPost(t, srv.URL+"/v21.0/"+phoneID+"/messages", "", waMsg("REF1", "+15551234567"))
		eventually(t, "both statuses given up", func() bool { return s.WebhookStats().Failed == 2 })
		s.Close()
		srv.Close()
		if st := s.WebhookStats(); st != (sim.WebhookStats{Retried: 8, Failed: 2}) {
			t.Errorf("%s: stats %+v", target, st)
		}
		out := logs.String()
		if strings.Count(out, "sim: webhook dropped after its last attempt") != 2 || !strings.Contains(out, "attempts=5") {
			t.Errorf("%s: log %q", target, out)
		}
		if strings.Contains(out, appSecret) {
			t.Errorf("the log has the app secret: %q", out)
		}
	}
	if n := len(rc.all()); n != 10 {
		t.Errorf("the receiver saw %d attempts, want 5 for each of 2 statuses", n)
	}
}

// TestWebhooksNeverBlockSends: with the receiver hung and the queue full,
// sends are still answered, the statuses that do not fit are dropped and
// counted, and Close does not wait for the hung receiver.
func TestWebhooksNeverBlockSends(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hung := make(chan struct{}, 1)
	rc := newReceiver(t, func(_ *hook, _ int, r *http.Request) int {
		select {
		case hung <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	defer close(release)
	cfg := sim.DefaultConfig()
	cfg.WebhookURL, cfg.AppSecret = rc.srv.URL, []byte(appSecret)
	cfg.StatusDelay = time.Hour // only the "sent" statuses, in this test
	s := sim.NewSized(cfg, 1, 1)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for i := range 6 {
		if r := mustPost(t, srv.URL+"/v21.0/"+phoneID+"/messages", "", waMsg(fmt.Sprint(i), "+15551234567")); r.status != http.StatusOK {
			t.Fatalf("send %d: %d %s", i, r.status, r.body)
		}
		if i == 0 {
			<-hung // the one worker is stuck on the first status
		}
	}
	// One status in flight, one queued, the other four "sent" dropped.
	if st := s.WebhookStats(); st.Dropped != 4 || st.Sent != 0 {
		t.Fatalf("stats %+v, want 4 dropped", st)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the hung receiver")
	}
	s.Close() // twice is harmless
	// The APIs still answer after Close, with no webhooks.
	if r := mustPost(t, srv.URL+"/v21.0/"+phoneID+"/messages", "", waMsg("late", "+15551234567")); r.status != http.StatusOK {
		t.Fatalf("send after Close: %d %s", r.status, r.body)
	}
}

func TestWebhooksOffByDefault(t *testing.T) {
	t.Parallel()
	s := sim.New(sim.DefaultConfig())
	s.Close()
	if st := s.WebhookStats(); st != (sim.WebhookStats{}) {
		t.Fatalf("stats %+v", st)
	}
	if c := s.Config(); c.StatusDelay != sim.DefaultStatusDelay || c.WebhookBackoff != sim.DefaultWebhookBackoff {
		t.Fatalf("defaults %v %v", c.StatusDelay, c.WebhookBackoff)
	}
}

func TestValidateWebhooks(t *testing.T) {
	t.Parallel()
	secret := []byte("s")
	for _, tc := range []struct {
		name string
		f    func(*sim.Config)
		want string // "" valid
	}{
		{"url and app secret", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "http://127.0.0.1:8080/", secret }, ""},
		{"https", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "https://hooks.example/msgq", secret }, ""},
		{"no url, no webhooks", func(c *sim.Config) { c.AppSecret, c.ReadAfter = secret, time.Second }, ""},
		{"no secret", func(c *sim.Config) { c.WebhookURL = "http://127.0.0.1:8080" }, "nothing could be signed"},
		{"no scheme", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "127.0.0.1:8080", secret }, "webhook-url must be"},
		{"ftp", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "ftp://h", secret }, "webhook-url must be"},
		{"no host", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "http:///x", secret }, "webhook-url must be"},
		{"query", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "http://h/?a=1", secret }, "webhook-url must be"},
		{"password not echoed", func(c *sim.Config) { c.WebhookURL, c.AppSecret = "ftp://u:hunter2@h", secret }, "webhook-url must be"},
		{"status delay", func(c *sim.Config) { c.StatusDelay = -1 }, "status-delay must not be negative"},
		{"read after", func(c *sim.Config) { c.ReadAfter = -1 }, "read-after must not be negative"},
		{"backoff", func(c *sim.Config) { c.WebhookBackoff = -1 }, "backoff must not be negative"},
	} {
		c := sim.DefaultConfig()
		tc.f(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
}

// syncBuf is a bytes.Buffer safe for a logger and a test at once.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
