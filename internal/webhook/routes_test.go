package webhook_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/store/sqlite"
	"github.com/msgq/msgq/internal/webhook"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// TestEachIdentityHasItsOwnRoute: /webhooks/<kind>/<identity> verifies
// with that identity's secrets alone and files the delivery under it,
// while the shared path keeps trying every identity of the format.
func TestEachIdentityHasItsOwnRoute(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rcv := webhook.NewReceiver(webhook.Config{Store: st, Routes: []webhook.Route{
		{Identity: "shop", Kind: &whatsapp.Kind, Verifier: &whatsapp.Verifier{AppSecret: []byte("shop-secret"), VerifyToken: "shop-token"}},
		{Identity: "outlet", Kind: &whatsapp.Kind, Verifier: &whatsapp.Verifier{AppSecret: []byte("outlet-secret"), VerifyToken: "outlet-token"}},
		{Identity: "api", Kind: &httpapi.Kind, Verifier: &httpapi.Verifier{Secrets: []verify.Secret{secretOld}}},
	}})
	srv := httptest.NewServer(rcv.Handler())
	defer func() { srv.Close(); rcv.Close() }()
	r := &rig{st: st, srv: srv, rcv: rcv}

	for i, c := range []struct {
		name, path, secret string
		want               int
		identity           string // the identity the delivery is filed under, when stored
	}{
		{"its own route, its own secret", "/webhooks/whatsapp/outlet", "outlet-secret", 200, "outlet"},
		{"its own route, another identity's secret", "/webhooks/whatsapp/outlet", "shop-secret", 401, ""},
		{"the shared path tries every identity", webhook.PathWhatsApp, "outlet-secret", 200, "outlet"},
		{"the shared path, the first identity", webhook.PathWhatsApp, "shop-secret", 200, "shop"},
		{"an identity that is not configured", "/webhooks/whatsapp/nobody", "shop-secret", 404, ""},
		{"an identity of another kind", "/webhooks/whatsapp/api", "shop-secret", 404, ""},
	} {
		// A delivery of its own each time: a copy of one stored already
		// would be answered 200 and not stored again.
		body := waStatus(fmt.Sprintf("wamid.ROUTE%d", i), "delivered", 1764410400)
		before := len(r.stored(t))
		code, _ := r.post(t, c.path, body, map[string]string{"X-Hub-Signature-256": verify.SignWhatsApp(body, []byte(c.secret))})
		evs := r.stored(t)
		if code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
			continue
		}
		switch {
		case c.identity == "" && len(evs) != before:
			t.Errorf("%s: stored %d deliveries, want none", c.name, len(evs)-before)
		case c.identity != "" && (len(evs) != before+1 || evs[len(evs)-1].Identity != c.identity || evs[len(evs)-1].Provider != "whatsapp"):
			t.Errorf("%s: stored %+v, want one whatsapp delivery for %s", c.name, evs[before:], c.identity)
		}
	}

	hb := httpStatus("msg_route", "delivered", time.Now())
	if code, _ := r.post(t, "/webhooks/http/api", hb, signHTTP("evt_route", time.Now(), hb, secretOld)); code != 200 {
		t.Errorf("http identity route: %d, want 200", code)
	}
	if evs := r.stored(t); evs[len(evs)-1].Identity != "api" || evs[len(evs)-1].Provider != "http" ||
		evs[len(evs)-1].Headers["webhook-id"] != "evt_route" {
		t.Errorf("http delivery stored as %+v", evs[len(evs)-1])
	}

	// The handshake on an identity's route takes that identity's token
	// only.
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/webhooks/whatsapp/outlet", "outlet-token", 200},
		{"/webhooks/whatsapp/outlet", "shop-token", 403},
		{webhook.PathWhatsApp, "outlet-token", 200},
	} {
		resp, err := srv.Client().Get(srv.URL + c.path + "?hub.mode=subscribe&hub.challenge=42&hub.verify_token=" + c.token)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("handshake on %s with %s: %d, want %d", c.path, c.token, resp.StatusCode, c.want)
		}
	}
}

// TestAFormatNoIdentitySpeaksAnswers404: today's paths stay mounted, with
// the hint they always gave.
func TestAFormatNoIdentitySpeaksAnswers404(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "msgq.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rcv := webhook.NewReceiver(webhook.Config{Store: st})
	srv := httptest.NewServer(rcv.Handler())
	defer func() { srv.Close(); rcv.Close() }()
	r := &rig{st: st, srv: srv, rcv: rcv}
	for path, hint := range map[string]string{
		webhook.PathWhatsApp: "no whatsapp identity has app_secret_env configured\n",
		webhook.PathHTTP:     "no http identity has webhook_secret_env configured\n",
	} {
		if code, msg := r.post(t, path, []byte(`{}`), nil); code != 404 || msg != hint {
			t.Errorf("%s: %d %q, want 404 %q", path, code, msg, hint)
		}
	}
}
