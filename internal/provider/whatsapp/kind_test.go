package whatsapp_test

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/webhook/verify"
)

func TestKindDecodesItsConfigStrictly(t *testing.T) {
	full := map[string]any{"base_url": "http://127.0.0.1:1", "phone_number_id": 1000001, "token_env": "T",
		"app_secret_env": "S", "verify_token_env": "V"}
	s, err := whatsapp.Kind.Decode(full)
	if err != nil {
		t.Fatal(err)
	}
	ws := s.(*whatsapp.Settings)
	if ws.PhoneNumberID != "1000001" || ws.BaseURL != "http://127.0.0.1:1" || ws.TokenEnv != "T" || ws.AppSecretEnv != "S" || ws.VerifyTokenEnv != "V" {
		t.Errorf("decoded %+v", ws)
	}
	if k, v := s.Sender(); k != "phone_number_id" || v != "1000001" {
		t.Errorf("Sender() = %s %s", k, v)
	}
	if s.Account() != "S" || s.ServiceWindow() != 24*time.Hour {
		t.Errorf("account %q, window %s", s.Account(), s.ServiceWindow())
	}
	if got := provider.MissingEnv(append(s.SendEnv(), s.WebhookEnv()...), func(string) string { return "" }); strings.Join(got, ", ") !=
		"T (token_env), S (app_secret_env), V (verify_token_env)" {
		t.Errorf("missing env %v", got)
	}
	without := func(key string) map[string]any {
		m := map[string]any{}
		for k, v := range full {
			if k != key {
				m[k] = v
			}
		}
		return m
	}
	if s, err := whatsapp.Kind.Decode(without("app_secret_env")); err != nil || s.ServiceWindow() != 0 {
		t.Errorf("without webhooks: %v, window %v; want none (msgq would never see the window open)", err, s)
	}
	for _, c := range []struct {
		name string
		raw  map[string]any
		want string
	}{
		{"no phone_number_id", without("phone_number_id"), "provider whatsapp needs phone_number_id"},
		{"no token_env", without("token_env"), "provider whatsapp needs token_env"},
		{"the http provider's secret", map[string]any{"phone_number_id": "1", "token_env": "T", "webhook_secret_env": "W"},
			"webhook_secret_env is for the http provider; whatsapp signs with app_secret_env"},
		{"a misspelling", map[string]any{"phone_number_id": "1", "token_evn": "T"}, `unknown setting "token_evn" for provider whatsapp (known: base_url,`},
		{"a list for a string", map[string]any{"phone_number_id": []any{"1"}, "token_env": "T"}, "phone_number_id must be a string"},
	} {
		if _, err := whatsapp.Kind.Decode(c.raw); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestKindBuildsItsClientWithTheTokenFromTheEnvironment(t *testing.T) {
	s, err := whatsapp.Kind.Decode(map[string]any{"phone_number_id": "1", "token_env": "T"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.New(func(name string) string { return map[string]string{"T": "secret"}[name] })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*whatsapp.Client); !ok || p.Idempotent() != whatsapp.Kind.Idempotent {
		t.Errorf("built %T, idempotent %v", p, p.Idempotent())
	}
	if _, ok := p.(provider.Lookuper); ok {
		t.Error("the Cloud API has no look-up, but the client says it has")
	}
}

// TestKindCodesAreTheClassifierTable: the rows Kind.Codes shows are the
// ones CodeClass classifies with, and the notice pause follows them.
func TestKindCodesAreTheClassifierTable(t *testing.T) {
	n := 0
	for _, row := range whatsapp.Kind.Codes {
		if row.Code == "200-299" {
			continue
		}
		for _, c := range strings.Split(row.Code, ", ") {
			code, err := strconv.ParseInt(c, 10, 64)
			if err != nil {
				t.Fatalf("row %+v: %v", row, err)
			}
			if class, _, known := whatsapp.CodeClass(code); !known || class != row.Class {
				t.Errorf("code %d: row says %s, CodeClass %s (known %v)", code, row.Class, class, known)
			}
			n++
		}
	}
	if n < 38 { // the 38 codes of docs/providers.md
		t.Errorf("only %d codes in the rows", n)
	}
	for code, want := range map[string]bool{"190": true, "250": true, "131031": true, "131047": false, "130429": false, "x": false, "": false} {
		if got := whatsapp.Kind.PausesOn(code); got != want {
			t.Errorf("PausesOn(%q) = %v, want %v", code, got, want)
		}
	}
}

func TestKindVerifiesWithTheIdentitysSecret(t *testing.T) {
	s, err := whatsapp.Kind.Decode(map[string]any{"phone_number_id": "1", "token_env": "T", "app_secret_env": "S", "verify_token_env": "V"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"S": "app-secret", "V": "verify-me"}
	v, err := whatsapp.Kind.Webhook.Verifier(s, func(n string) string { return env[n] })
	if err != nil || v == nil {
		t.Fatalf("verifier %v, %v", v, err)
	}
	body := []byte(`{"object":"whatsapp_business_account","entry":[]}`)
	d := func(sig string, body []byte) *provider.Delivery {
		h := http.Header{}
		if sig != "" {
			h.Set("X-Hub-Signature-256", sig)
		}
		return &provider.Delivery{Header: h, Body: body, Now: time.Now()}
	}
	if err := v.Precheck(d("", nil)); !errors.Is(err, verify.ErrMissingSignature) {
		t.Errorf("unsigned precheck: %v", err)
	}
	if err := v.Precheck(d("sha256=zz", nil)); !errors.Is(err, verify.ErrBadSignature) {
		t.Errorf("malformed precheck: %v", err)
	}
	if err := v.Verify(d(verify.SignWhatsApp(body, []byte("app-secret")), body)); err != nil {
		t.Errorf("signed: %v", err)
	}
	if err := v.Verify(d(verify.SignWhatsApp(body, []byte("another")), body)); !errors.Is(err, verify.ErrBadSignature) {
		t.Errorf("another secret: %v", err)
	}
	h, ok := v.(provider.Handshaker)
	if !ok {
		t.Fatal("no handshake")
	}
	q := url.Values{"hub.mode": {"subscribe"}, "hub.verify_token": {"verify-me"}, "hub.challenge": {"42"}}
	if c, ok := h.Handshake(q); !ok || c != "42" {
		t.Errorf("handshake %q %v", c, ok)
	}
	q.Set("hub.verify_token", "wrong")
	if _, ok := h.Handshake(q); ok {
		t.Error("a wrong token was accepted")
	}
	// Without an app secret the identity verifies nothing: no route.
	s, _ = whatsapp.Kind.Decode(map[string]any{"phone_number_id": "1", "token_env": "T"})
	if v, err := whatsapp.Kind.Webhook.Verifier(s, func(string) string { return "" }); v != nil || err != nil {
		t.Errorf("without app_secret_env: %v, %v", v, err)
	}
}
