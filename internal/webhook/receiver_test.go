package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
)

const (
	appSecret   = "test-app-secret"
	verifyToken = "test-verify-token"
	phoneID     = "106540352242922"
)

var (
	secretOld = mustSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	secretNew = mustSecret("whsec_c2VjcmV0LW51bWJlci10d28tZm9yLXJvdGF0aW9u")
)

func mustSecret(s string) verify.Secret {
	sec, err := verify.ParseSecret(s)
	if err != nil {
		panic(err)
	}
	return sec
}

// rig is a receiver over a real SQLite store, served on loopback.
type rig struct {
	st  store.Store
	srv *httptest.Server
	rcv *webhook.Receiver
}

func newRig(t *testing.T, maxBody int64) *rig {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{st: st}
	r.rcv = webhook.NewReceiver(webhook.Config{
		Store: st,
		Routes: []webhook.Route{
			{Identity: "shop", Kind: &whatsapp.Kind, Verifier: &whatsapp.Verifier{AppSecret: []byte(appSecret), VerifyToken: verifyToken}},
			{Identity: "api", Kind: &httpapi.Kind, Verifier: &httpapi.Verifier{Secrets: []verify.Secret{secretOld, secretNew}}},
		},
		MaxBody: maxBody,
	})
	r.srv = httptest.NewServer(r.rcv.Handler())
	t.Cleanup(func() {
		r.srv.Close()
		r.rcv.Close()
		st.Close()
	})
	return r
}

func (r *rig) post(t *testing.T, path string, body []byte, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *rig) postWhatsApp(t *testing.T, body []byte) int {
	t.Helper()
	code, _ := r.post(t, webhook.PathWhatsApp, body, map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp(body, []byte(appSecret))})
	return code
}

// stored is every delivery the store holds that is not processed yet.
func (r *rig) stored(t *testing.T) []store.WebhookEvent {
	t.Helper()
	evs, err := r.st.WebhookPending(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func waStatus(wamid, status string, ts int64) []byte {
	errs := ""
	if status == "failed" {
		errs = `,"errors":[{"code":131026,"title":"Message undeliverable","message":"Message undeliverable","error_data":{"details":"Message Undeliverable."}}]`
	}
	return fmt.Appendf(nil, `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[{"value":`+
		`{"messaging_product":"whatsapp","metadata":{"display_phone_number":"15550783881","phone_number_id":%q},`+
		`"statuses":[{"id":%q,"status":%q,"timestamp":"%d","recipient_id":"15551234567"%s}]},"field":"messages"}]}]}`,
		phoneID, wamid, status, ts, errs)
}

func httpStatus(id, status string, at time.Time) []byte {
	return fmt.Appendf(nil, `{"type":"message.status","timestamp":%q,"data":{"id":%q,"status":%q}}`,
		at.UTC().Format(time.RFC3339), id, status)
}

func signHTTP(id string, at time.Time, body []byte, secrets ...verify.Secret) map[string]string {
	ts := strconv.FormatInt(at.Unix(), 10)
	var sigs []string
	for _, s := range secrets {
		sigs = append(sigs, verify.Sign(id, ts, body, s))
	}
	return map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": strings.Join(sigs, " ")}
}

func TestWhatsAppVerificationHandshake(t *testing.T) {
	r := newRig(t, 0)
	get := func(q string) (int, string) {
		resp, err := r.srv.Client().Get(r.srv.URL + webhook.PathWhatsApp + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("hub.mode=subscribe&hub.verify_token=" + verifyToken + "&hub.challenge=1158201444"); code != 200 || body != "1158201444" {
		t.Errorf("right token: %d %q, want 200 with the challenge", code, body)
	}
	for _, q := range []string{
		"hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1",
		"hub.mode=subscribe&hub.challenge=1",
		"hub.mode=unsubscribe&hub.verify_token=" + verifyToken + "&hub.challenge=1",
	} {
		if code, body := get(q); code != http.StatusForbidden || body == "1" {
			t.Errorf("%s: %d %q, want 403", q, code, body)
		}
	}
}

func TestReceiverAnswers(t *testing.T) {
	body := waStatus("wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA", "delivered", 1764410400)
	for _, c := range []struct {
		name string
		path string
		body []byte
		hdr  func(body []byte) map[string]string
		want int
	}{
		{"whatsapp signed", webhook.PathWhatsApp, body,
			func([]byte) map[string]string {
				return map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp(body, []byte(appSecret))}
			}, 200},
		{"whatsapp unsigned", webhook.PathWhatsApp, body, func([]byte) map[string]string { return nil }, 401},
		{"whatsapp wrong secret", webhook.PathWhatsApp, body,
			func([]byte) map[string]string {
				return map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp(body, []byte("another app"))}
			}, 401},
		{"whatsapp body changed after signing", webhook.PathWhatsApp, append(bytes.Clone(body[:len(body)-1]), ' ', '}'),
			func([]byte) map[string]string {
				return map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp(body, []byte(appSecret))}
			}, 401},
		{"whatsapp signed but not a webhook", webhook.PathWhatsApp, []byte(`{"hello":"world"}`),
			func([]byte) map[string]string {
				return map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp([]byte(`{"hello":"world"}`), []byte(appSecret))}
			}, 400},
		{"whatsapp signed but not JSON", webhook.PathWhatsApp, []byte(`{"object":"whatsapp_business_account",`),
			func([]byte) map[string]string {
				return map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp([]byte(`{"object":"whatsapp_business_account",`), []byte(appSecret))}
			}, 400},
		{"http signed", webhook.PathHTTP, httpStatus("msg_1", "delivered", time.Now()),
			func(body []byte) map[string]string {
				return signHTTP("evt_1", time.Now(), body, secretOld)
			}, 200},
		{"http signed with the new secret only (rotation)", webhook.PathHTTP, httpStatus("msg_1", "delivered", time.Now()),
			func(body []byte) map[string]string {
				return signHTTP("evt_2", time.Now(), body, secretNew)
			}, 200},
		{"http stale timestamp", webhook.PathHTTP, httpStatus("msg_1", "delivered", time.Now()),
			func(body []byte) map[string]string {
				return signHTTP("evt_3", time.Now().Add(-10*time.Minute), body, secretOld)
			}, 401},
		{"http timestamp from the future", webhook.PathHTTP, httpStatus("msg_1", "delivered", time.Now()),
			func(body []byte) map[string]string {
				return signHTTP("evt_4", time.Now().Add(10*time.Minute), body, secretOld)
			}, 401},
		{"http unknown secret", webhook.PathHTTP, httpStatus("msg_1", "delivered", time.Now()),
			func(body []byte) map[string]string {
				return signHTTP("evt_5", time.Now(), body, mustSecret("whsec_b3RoZXIta2V5"))
			}, 401},
		{"http unsigned", webhook.PathHTTP, httpStatus("msg_1", "delivered", time.Now()), func([]byte) map[string]string { return nil }, 401},
		{"http signed but malformed", webhook.PathHTTP, []byte(`[1,2,3]`),
			func(body []byte) map[string]string { return signHTTP("evt_6", time.Now(), body, secretOld) }, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, 0)
			code, msg := r.post(t, c.path, c.body, c.hdr(c.body))
			if code != c.want {
				t.Fatalf("answered %d (%s), want %d", code, strings.TrimSpace(msg), c.want)
			}
			evs := r.stored(t)
			if c.want != 200 {
				if len(evs) != 0 {
					t.Fatalf("a refused delivery was stored: %d events", len(evs))
				}
				return
			}
			if len(evs) != 1 || !bytes.Equal(evs[0].Body, c.body) {
				t.Fatalf("stored %d events, want the body byte for byte", len(evs))
			}
			if evs[0].ReceivedAt.IsZero() || evs[0].Identity == "" {
				t.Errorf("stored event lacks its receipt time or identity: %+v", evs[0])
			}
		})
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	r := newRig(t, 1024)
	big := waStatus("wamid.X", "delivered", 1764410400)
	big = append(big[:len(big)-1], []byte(`,"pad":"`+strings.Repeat("x", 2000)+`"}`)...)
	if code := r.postWhatsApp(t, big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("answered %d, want 413", code)
	}
	// Without a Content-Length the limit still holds: the body is cut off
	// while it is read.
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+webhook.PathWhatsApp, io.MultiReader(bytes.NewReader(big)))
	req.ContentLength = -1
	req.Header.Set("X-Hub-Signature-256", verify.SignWhatsApp(big, []byte(appSecret)))
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: answered %d, want 413", resp.StatusCode)
	}
	if evs := r.stored(t); len(evs) != 0 {
		t.Fatalf("stored %d oversized deliveries", len(evs))
	}
}

func TestStoreFailureIs500AndHealthSays503(t *testing.T) {
	r := newRig(t, 0)
	if resp, err := r.srv.Client().Get(r.srv.URL + webhook.PathHealth); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v, want 200", resp, err)
	}
	r.st.Close() // the database goes away
	if code := r.postWhatsApp(t, waStatus("wamid.X", "delivered", 1764410400)); code != http.StatusInternalServerError {
		t.Fatalf("answered %d with the store gone, want 500 so that the provider retries", code)
	}
	resp, err := r.srv.Client().Get(r.srv.URL + webhook.PathHealth)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("healthz with the store gone: %d, want 503", resp.StatusCode)
	}
}

// sentRow enqueues a row and takes it through a drain's claim and accept,
// recording wamid as its provider id.
func sentRow(t *testing.T, st store.Store, key, wamid string) string {
	t.Helper()
	ctx := context.Background()
	res, err := st.MessageEnqueue(ctx, &store.EnqueueParams{Key: key, To: "+15551234567", Channel: store.ChannelWhatsApp,
		Identity: "shop", Payload: store.Payload{Template: "order_update", Lang: "en"}})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := st.MessageClaim(ctx, &store.ClaimParams{Owner: "test", LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(cl) != 1 {
		t.Fatalf("claim: %v (%d rows)", err, len(cl))
	}
	if _, err := st.MessageTransition(ctx, &store.TransitionParams{ID: res.Message.ID, From: state.Sending,
		Event: state.Event{Kind: state.Accept}, Source: store.SourceDrain, LeaseOwner: "test", ProviderID: wamid}); err != nil {
		t.Fatal(err)
	}
	return res.Message.ID
}

func TestSameStatusThreeTimesAndShuffledOrder(t *testing.T) {
	r := newRig(t, 0)
	ctx := context.Background()
	wamid := "wamid.HBgLMTU1NTEyMzQ1NjcVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
	id := sentRow(t, r.st, "order-1001-shipped", wamid)
	p := &webhook.Processor{Store: r.st, PhoneNumberIDs: map[string]string{phoneID: "shop"}}

	for range 3 {
		if code := r.postWhatsApp(t, waStatus(wamid, "delivered", 1764410400)); code != 200 {
			t.Fatalf("answered %d", code)
		}
	}
	if _, err := p.Once(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := r.st.MessageGet(ctx, store.DefaultTenant, id)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := r.st.WebhookStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != state.Delivered || ws.DuplicateWebhooks != 2 {
		t.Fatalf("after the same status three times: %s with %d duplicates, want delivered with 2", m.State, ws.DuplicateWebhooks)
	}

	// Shuffled sent/delivered/read (each posted twice) for fresh rows: the
	// end is read whatever the order, and every repeat is counted.
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 6 {
		wamid := fmt.Sprintf("wamid.SHUFFLE%d", i)
		id := sentRow(t, r.st, fmt.Sprintf("shuffle-%d", i), wamid)
		seq := []string{"sent", "delivered", "read", "sent", "delivered", "read"}
		rnd.Shuffle(len(seq), func(a, b int) { seq[a], seq[b] = seq[b], seq[a] })
		before := ws.DuplicateWebhooks
		for j, s := range seq {
			ts := map[string]int64{"sent": 1764410400, "delivered": 1764410405, "read": 1764410460}[s]
			if code := r.postWhatsApp(t, waStatus(wamid, s, ts)); code != 200 {
				t.Fatalf("answered %d", code)
			}
			if j%2 == 1 { // process part-way, so that order matters
				if _, err := p.Once(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := p.Once(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := r.st.MessageGet(ctx, store.DefaultTenant, id)
		if err != nil {
			t.Fatal(err)
		}
		if ws, err = r.st.WebhookStats(ctx); err != nil {
			t.Fatal(err)
		}
		if m.State != state.Read || ws.DuplicateWebhooks-before != 3 {
			t.Fatalf("order %v: %s with %d new duplicates, want read with 3", seq, m.State, ws.DuplicateWebhooks-before)
		}
		hist, err := r.st.MessageHistory(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var webhookRows, applied int
		for _, h := range hist {
			if h.Source == store.SourceWebhook {
				webhookRows++
				if h.Applied {
					applied++
				}
			}
		}
		// Three distinct statuses reach history, whatever order; those
		// that arrived after a higher one are recorded, not applied.
		if webhookRows != 3 || applied < 1 {
			t.Fatalf("order %v: %d webhook history rows (%d applied), want 3", seq, webhookRows, applied)
		}
	}
}
