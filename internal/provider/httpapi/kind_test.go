package httpapi_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/webhook/verify"
)

func TestKindDecodesItsConfigStrictly(t *testing.T) {
	s, err := httpapi.Kind.Decode(map[string]any{"base_url": "http://127.0.0.1:1", "token_env": "T", "webhook_secret_env": "W"})
	if err != nil {
		t.Fatal(err)
	}
	if hs := s.(*httpapi.Settings); hs.BaseURL != "http://127.0.0.1:1" || hs.TokenEnv != "T" || hs.WebhookSecretEnv != "W" {
		t.Errorf("decoded %+v", hs)
	}
	if k, v := s.Sender(); k != "" || v != "" || s.Account() != "" || s.ServiceWindow() != 0 {
		t.Errorf("sender %q %q, account %q, window %s", k, v, s.Account(), s.ServiceWindow())
	}
	p, err := s.New(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(provider.Lookuper); !ok || !p.Idempotent() || !httpapi.Kind.Idempotent {
		t.Errorf("built %T: want an idempotent client with a look-up", p)
	}
	for _, c := range []struct {
		name string
		raw  map[string]any
		want string
	}{
		{"no token_env", map[string]any{"base_url": "http://x"}, "provider http needs token_env"},
		{"no base_url", map[string]any{"token_env": "T"}, "provider http needs base_url"},
		{"WhatsApp's secret", map[string]any{"base_url": "http://x", "token_env": "T", "app_secret_env": "S"},
			"app_secret_env and verify_token_env are for provider whatsapp; provider http signs with webhook_secret_env"},
		{"a misspelling", map[string]any{"base_url": "http://x", "token_evn": "T"}, `unknown setting "token_evn" for provider http`},
		{"a WhatsApp number", map[string]any{"base_url": "http://x", "token_env": "T", "phone_number_id": "1"}, `unknown setting "phone_number_id"`},
	} {
		if _, err := httpapi.Kind.Decode(c.raw); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestSecretVerifier(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	env := map[string]string{"ONE": secret, "BAD": "not-a-secret", "BLANK": "  "}
	getenv := func(n string) string { return env[n] }
	if v, err := httpapi.SecretVerifier("", getenv); v != nil || err != nil {
		t.Errorf("no variable: %v, %v", v, err)
	}
	if _, err := httpapi.SecretVerifier("BAD", getenv); err == nil || err.Error() != "BAD (webhook_secret_env) does not hold whsec_ secrets" {
		t.Errorf("bad secret: %v", err)
	}
	if _, err := httpapi.SecretVerifier("BLANK", getenv); err == nil || err.Error() != "BLANK (webhook_secret_env) holds no whsec_ secret" {
		t.Errorf("blank: %v", err)
	}
	v, err := httpapi.SecretVerifier("ONE", getenv)
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := verify.ParseSecret(secret)
	now := time.Now()
	body := []byte(`{"type":"message.status"}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	d := func(sig, ts string, body []byte) *provider.Delivery {
		h := http.Header{}
		h.Set("webhook-id", "evt_1")
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		return &provider.Delivery{Header: h, Body: body, Now: now, Tolerance: time.Minute}
	}
	if err := v.Verify(d(verify.Sign("evt_1", ts, body, sec), ts, body)); err != nil {
		t.Errorf("signed: %v", err)
	}
	other, _ := verify.ParseSecret("whsec_c2VjcmV0LW51bWJlci10d28tZm9yLXJvdGF0aW9u")
	if err := v.Verify(d(verify.Sign("evt_1", ts, body, other), ts, body)); !errors.Is(err, verify.ErrBadSignature) {
		t.Errorf("another secret: %v", err)
	}
	stale := strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)
	if err := v.Precheck(d(verify.Sign("evt_1", stale, body, sec), stale, nil)); !errors.Is(err, verify.ErrStaleTimestamp) {
		t.Errorf("stale precheck: %v", err)
	}
}
