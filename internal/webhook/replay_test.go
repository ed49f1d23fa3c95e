package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// stats reads the store's webhook figures.
func (r *rig) stats(t *testing.T) *store.WebhookStats {
	t.Helper()
	ws, err := r.st.WebhookStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// TestAWhatsAppReplayIsAnswered200AndStoredOnce: WhatsApp's signature
// carries no time, so a signed body can be posted again without end. Each
// copy is answered 200 (Meta's own retries must not be refused), the body
// is stored once, and the copies are counted: as replays, and their
// statuses as duplicates, as processing would have counted them.
func TestAWhatsAppReplayIsAnswered200AndStoredOnce(t *testing.T) {
	r := newRig(t, 0)
	body := waStatus("wamid.REPLAYED", "delivered", 1764410400)
	for i := range 5 {
		if code := r.postWhatsApp(t, body); code != http.StatusOK {
			t.Fatalf("copy %d answered %d, want 200", i, code)
		}
	}
	// The identity's own route files it under the same identity: a copy
	// there too.
	code, _ := r.post(t, webhook.PathWhatsApp+"/shop", body, map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp(body, []byte(appSecret))})
	if code != http.StatusOK {
		t.Fatalf("a copy on the identity's route answered %d, want 200", code)
	}
	evs := r.stored(t)
	if len(evs) != 1 || string(evs[0].Body) != string(body) || !strings.HasPrefix(evs[0].DedupeKey, "body:") {
		t.Fatalf("stored %d deliveries (%+v), want the body once under its digest", len(evs), evs)
	}
	if ws := r.stats(t); ws.ReplayedWebhooks != 5 || ws.DuplicateWebhooks != 5 {
		t.Errorf("stats %+v, want 5 replays, each with its one status a duplicate", ws)
	}
	// Another body is another delivery.
	if code := r.postWhatsApp(t, waStatus("wamid.REPLAYED", "read", 1764410460)); code != http.StatusOK {
		t.Fatalf("a new status answered %d", code)
	}
	if evs := r.stored(t); len(evs) != 2 {
		t.Errorf("%d deliveries stored, want 2", len(evs))
	}
}

// TestAStandardWebhooksReplayIsTheSameWebhookID: for the http provider the
// signed webhook-id names the delivery. A retry (a new timestamp, signed
// again) and a second body under the same id are copies: answered 200, the
// first body kept. A timestamp past the tolerance is refused before that.
func TestAStandardWebhooksReplayIsTheSameWebhookID(t *testing.T) {
	r := newRig(t, 0)
	now := time.Now()
	first := httpStatus("msg_1", "delivered", now)
	post := func(id string, at time.Time, body []byte) int {
		t.Helper()
		code, _ := r.post(t, webhook.PathHTTP, body, signHTTP(id, at, body, secretOld))
		return code
	}
	if code := post("evt_replayed", now, first); code != http.StatusOK {
		t.Fatalf("first copy answered %d", code)
	}
	if code := post("evt_replayed", now.Add(time.Minute), first); code != http.StatusOK {
		t.Fatalf("a retry answered %d", code)
	}
	if code := post("evt_replayed", now, httpStatus("msg_1", "failed", now)); code != http.StatusOK {
		t.Fatalf("another body under the same id answered %d", code)
	}
	if code := post("evt_replayed", now.Add(-10*time.Minute), first); code != http.StatusUnauthorized {
		t.Fatalf("a copy past the tolerance answered %d, want 401", code)
	}
	evs := r.stored(t)
	if len(evs) != 1 || string(evs[0].Body) != string(first) || !strings.HasPrefix(evs[0].DedupeKey, "webhook-id:") {
		t.Fatalf("stored %+v, want the first body once under its webhook-id", evs)
	}
	if ws := r.stats(t); ws.ReplayedWebhooks != 2 {
		t.Errorf("stats %+v, want 2 replays", ws)
	}
	if code := post("evt_other", now, first); code != http.StatusOK || len(r.stored(t)) != 2 {
		t.Errorf("the same body under another id: %d, %d stored; want a delivery of its own", code, len(r.stored(t)))
	}
}

// TestATwilioReplayIsWhatItsSignatureCovers: Twilio signs the URL and the
// form's parameters, not the body's bytes, so a captured callback with its
// fields reordered or spelt with other escapes, or posted with the
// default port in Host, verifies as the original: each is a copy of it.
func TestATwilioReplayIsWhatItsSignatureCovers(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// No --public-url: the URL is the request's Host, which a replayer
	// chooses.
	rcv := webhook.NewReceiver(webhook.Config{Store: st,
		Routes: []webhook.Route{{Identity: "sms-us", Kind: &twilio.Kind, Verifier: &twilio.Verifier{AuthToken: "tok"}}}})
	srv := httptest.NewServer(rcv.Handler())
	defer func() { srv.Close(); rcv.Close() }()

	path := "/webhooks/twilio/sms-us?msgq_id=01MSGQROW"
	f := url.Values{"MessageSid": {"SM" + strings.Repeat("c", 32)}, "MessageStatus": {"delivered"},
		"From": {"+15005550006"}, "To": {"+15551234567"}}
	sig := twilio.Signature("http://hooks.example"+path, f, "tok")
	post := func(host, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(twilio.SignatureHeader, sig)
		req.Header.Set("I-Twilio-Idempotency-Token", body) // not signed: a replayer sets what it likes
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct{ host, body string }{
		{"hooks.example", f.Encode()},
		{"hooks.example", f.Encode()},
		{"hooks.example", "To=%2B15551234567&From=%2B15005550006&MessageStatus=deliver%65d&MessageSid=" + f.Get("MessageSid")},
		{"hooks.example:80", f.Encode()},
	} {
		if code := post(c.host, c.body); code != http.StatusOK {
			t.Fatalf("%s %s: answered %d, want 200", c.host, c.body, code)
		}
	}
	evs, err := st.WebhookPending(ctx, 10)
	if err != nil || len(evs) != 1 || string(evs[0].Body) != f.Encode() {
		t.Fatalf("stored %+v, %v; want the first copy alone", evs, err)
	}
	if ws, err := st.WebhookStats(ctx); err != nil || ws.ReplayedWebhooks != 3 {
		t.Errorf("stats %+v, %v; want 3 replays", ws, err)
	}
}
