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

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
)

// TestATwilioDeliveryKeepsTheURLAndTimeItWasReceivedAt: a Twilio delivery
// (Webhook.KeepsCall) is verified over the public URL and stored with that
// URL and its receive time as pseudo-headers, the time equal to the stored
// received_at; a client's own header of the same name is not what is
// kept. The processor then reads the stored delivery as the receiver did:
// the inbound STOP is filed under the identity and records its opt-out.
func TestATwilioDeliveryKeepsTheURLAndTimeItWasReceivedAt(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const public = "https://hooks.example.com"
	now := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	rcv := webhook.NewReceiver(webhook.Config{Store: st, PublicURL: public, Now: func() time.Time { return now },
		Routes: []webhook.Route{{Identity: "sms-us", Kind: &twilio.Kind, Verifier: &twilio.Verifier{AuthToken: "tok"}}}})
	srv := httptest.NewServer(rcv.Handler())
	defer func() { srv.Close(); rcv.Close() }()

	path := "/webhooks/twilio/sms-us"
	f := url.Values{"MessageSid": {"SM" + strings.Repeat("a", 32)}, "From": {"+15551234567"}, "To": {"+15005550006"},
		"Body": {"Stop"}, "SmsStatus": {"received"}, "NumMedia": {"0"}}
	post := func(signedURL string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(twilio.SignatureHeader, twilio.Signature(signedURL, f, "tok"))
		req.Header.Set("X-Msgq-Url", "https://forged.example/x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(srv.URL + path); code != http.StatusUnauthorized {
		t.Errorf("signed over the listener's own URL: %d, want 401", code)
	}
	if code := post(public + path); code != http.StatusOK {
		t.Fatalf("signed over the public URL: %d, want 200", code)
	}
	evs, err := st.WebhookPending(context.Background(), 10)
	if err != nil || len(evs) != 1 {
		t.Fatalf("stored %+v, %v; want the one verified delivery", evs, err)
	}
	ev := evs[0]
	at, err := time.Parse(time.RFC3339Nano, ev.Headers[provider.HeaderReceivedAt])
	if ev.Headers[provider.HeaderURL] != public+path || err != nil || !at.Equal(ev.ReceivedAt) || !at.Equal(now.Truncate(store.Resolution)) {
		t.Errorf("kept headers %v, received_at %s; want the public URL and the receive time", ev.Headers, ev.ReceivedAt)
	}

	p := &webhook.Processor{Store: st}
	sum, err := p.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Inbound != 1 || sum.OptOuts != 1 || sum.Unreadable != 0 {
		t.Errorf("processed %+v, want the inbound message and its opt-out", sum)
	}
	if out, err := st.OptedOut(context.Background(), "sms-us", "+15551234567"); err != nil || !out {
		t.Errorf("opted out: %v, %v; want the STOP recorded", out, err)
	}
}

// TestATwilioCallbackOfASuspendedAccountPausesTheIdentity: a failure
// callback whose code is the account's (30002) pauses the identity whose
// route received it, once: the same callback delivered again is a
// duplicate and does not pause an identity an operator has resumed.
func TestATwilioCallbackOfASuspendedAccountPausesTheIdentity(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rcv := webhook.NewReceiver(webhook.Config{Store: st,
		Routes: []webhook.Route{{Identity: "sms-us", Kind: &twilio.Kind, Verifier: &twilio.Verifier{AuthToken: "tok"}}}})
	srv := httptest.NewServer(rcv.Handler())
	defer func() { srv.Close(); rcv.Close() }()

	path := "/webhooks/twilio/sms-us?msgq_id=01MSGQROW"
	f := url.Values{"MessageSid": {"SM" + strings.Repeat("b", 32)}, "MessageStatus": {"undelivered"}, "ErrorCode": {"30002"},
		"ErrorMessage": {"Account suspended"}, "From": {"+15005550006"}, "To": {"+15551234567"}}
	post := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(f.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(twilio.SignatureHeader, twilio.Signature(srv.URL+path, f, "tok"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("callback answered %d, want 200", resp.StatusCode)
		}
	}
	paused := func() store.IdentityState {
		t.Helper()
		ids, err := st.IdentityStates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if id.Name == "sms-us" {
				return id
			}
		}
		return store.IdentityState{}
	}
	p := &webhook.Processor{Store: st}

	post()
	if _, err := p.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if id := paused(); !id.Paused || !strings.Contains(id.Reason, "30002") {
		t.Fatalf("after a 30002 callback: %+v, want sms-us paused naming the code", id)
	}
	if err := st.IdentityResume(ctx, "sms-us"); err != nil {
		t.Fatal(err)
	}
	post()
	if _, err := p.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if id := paused(); id.Paused {
		t.Errorf("the same callback again paused the resumed identity again: %+v", id)
	}
}
