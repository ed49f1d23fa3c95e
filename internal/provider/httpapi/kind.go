package httpapi

import (
	"fmt"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// Name is the provider's name in the config file and in stored deliveries.
const Name = "http"

// Kind is the generic HTTP messaging API, "http" in the config.
var Kind = provider.Kind{
	Name: Name,
	// The API carries the channel in each request: an identity sends on
	// the one configured, or on either.
	Channels:   []string{store.ChannelWhatsApp, store.ChannelSMS},
	Address:    provider.AddressPhone,
	Idempotent: true, // Idempotency-Key
	Decode:     decode,
	Codes: []provider.Code{
		{Code: CodeKeyReused, Class: retry.Permanent, Meaning: "the same key with another body: an operator must look (409)"},
		{Code: CodeWindowClosed, Class: retry.Permanent, Meaning: "customer-service window closed: a fallback template may be sent"},
		{Code: CodeConsentRequired, Class: retry.Permanent, Meaning: "the recipient has not consented"},
		{Code: CodePairRateLimited, Class: retry.RateLimited, Meaning: "that recipient only: the drain slows it alone"},
		{Code: "401, 403", Class: retry.Identity, Meaning: "token refused"},
		{Code: "429", Class: retry.RateLimited, Meaning: "rate limited (Retry-After honoured)"},
		{Code: "408, 5xx", Class: retry.Transient, Meaning: "safe to repeat: the same key"},
		{Code: "other 4xx", Class: retry.Permanent, Meaning: "refused"},
	},
	Webhook: &Webhook,
}

// Webhook is the http API's webhook side: Standard Webhooks 1.0, one event
// per request. The simulator (msgq sim serve) speaks it too.
var Webhook = provider.Webhook{
	Name:      Name,
	SecretKey: "webhook_secret_env",
	TellWhy:   true,
	Headers:   []string{"Webhook-Id", "Webhook-Timestamp", "Webhook-Signature", "Content-Type", "User-Agent"},
	Verifier:  verifier,
	Parse: func(body []byte, h map[string]string) (*payload.Batch, error) {
		return payload.HTTP(body, h["webhook-id"])
	},
	// Standard Webhooks: webhook-id is signed, and names the message:
	// retries carry the same one. A second body under the same id is a
	// replay too (the first is kept).
	Dedupe: func(body []byte, h map[string]string) string {
		if id := h["webhook-id"]; id != "" {
			return provider.DigestKey("webhook-id", []byte(id))
		}
		return provider.DigestKey("body", body)
	},
}

var settingKeys = []string{"base_url", "token_env", "webhook_secret_env"}

// Settings is an http identity's configuration.
type Settings struct {
	BaseURL string
	// TokenEnv and WebhookSecretEnv name the environment variables holding
	// the bearer token and the Standard Webhooks secret(s) (whsec_...,
	// space-separated to rotate).
	TokenEnv, WebhookSecretEnv string
}

// NotWhatsApp explains WhatsApp's webhook keys on a kind that signs with
// Standard Webhooks (http, and the simulator).
func NotWhatsApp(kind string) func(string) string {
	return func(k string) string {
		if k == "app_secret_env" || k == "verify_token_env" {
			return "app_secret_env and verify_token_env are for provider whatsapp; provider " + kind + " signs with webhook_secret_env"
		}
		return ""
	}
}

func decode(raw map[string]any) (provider.Settings, error) {
	if err := provider.Strict(Name, raw, settingKeys, NotWhatsApp(Name)); err != nil {
		return nil, err
	}
	var s Settings
	if err := provider.Strings(raw, provider.StringSetting{Key: "base_url", Dst: &s.BaseURL}, provider.StringSetting{Key: "token_env", Dst: &s.TokenEnv}, provider.StringSetting{Key: "webhook_secret_env", Dst: &s.WebhookSecretEnv}); err != nil {
		return nil, err
	}
	switch {
	case s.TokenEnv == "":
		return nil, fmt.Errorf("provider http needs token_env (the environment variable holding its token)")
	case s.BaseURL == "":
		return nil, fmt.Errorf("provider http needs base_url")
	}
	return &s, nil
}

// SendEnv is the token.
func (s *Settings) SendEnv() []provider.Env {
	return []provider.Env{{Key: "token_env", Name: s.TokenEnv}}
}

// WebhookEnv is the webhook secret, when configured.
func (s *Settings) WebhookEnv() []provider.Env { return SecretEnv(s.WebhookSecretEnv) }

// SecretEnv is the webhook_secret_env variable as an Env list.
func SecretEnv(name string) []provider.Env {
	if name == "" {
		return nil
	}
	return []provider.Env{{Key: "webhook_secret_env", Name: name}}
}

// New builds the client with the token from the environment.
func (s *Settings) New(getenv func(string) string) (provider.Provider, error) {
	return New(Config{BaseURL: s.BaseURL, Token: getenv(s.TokenEnv)}), nil
}

// Sender is none: the API's events name no sender of ours.
func (s *Settings) Sender() (string, string) { return "", "" }

// Account is none: the API has no shared templates.
func (s *Settings) Account() string { return "" }

// ServiceWindow is none unless configured.
func (s *Settings) ServiceWindow() time.Duration { return 0 }

// Verifier checks Standard Webhooks signatures with one identity's
// secrets (several during a rotation).
type Verifier struct {
	Secrets []verify.Secret
}

func verifier(ps provider.Settings, getenv func(string) string) (provider.Verifier, error) {
	return SecretVerifier(ps.(*Settings).WebhookSecretEnv, getenv)
}

// SecretVerifier reads the whsec_ secrets in the variable name (nil
// verifier when name is ""). A malformed one is a configuration error.
func SecretVerifier(name string, getenv func(string) string) (provider.Verifier, error) {
	if name == "" {
		return nil, nil
	}
	v := &Verifier{}
	for _, f := range strings.Fields(getenv(name)) {
		s, err := verify.ParseSecret(f)
		if err != nil {
			return nil, fmt.Errorf("%s (webhook_secret_env) does not hold whsec_ secrets", name)
		}
		v.Secrets = append(v.Secrets, s)
	}
	if len(v.Secrets) == 0 {
		return nil, fmt.Errorf("%s (webhook_secret_env) holds no whsec_ secret", name)
	}
	return v, nil
}

func headers(d *provider.Delivery) (id, ts, sig string) {
	return d.Header.Get("webhook-id"), d.Header.Get("webhook-timestamp"), d.Header.Get("webhook-signature")
}

// Precheck refuses missing headers or a stale timestamp before the body is
// read, whatever the body (see verify.Headers).
func (v *Verifier) Precheck(d *provider.Delivery) error {
	id, ts, sig := headers(d)
	return verify.Headers(id, ts, sig, d.Now, d.Tolerance)
}

// Verify checks the signature over id, timestamp and body.
func (v *Verifier) Verify(d *provider.Delivery) error {
	id, ts, sig := headers(d)
	return verify.Verify(id, ts, sig, d.Body, d.Now, d.Tolerance, v.Secrets...)
}
