package sim

import (
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

// Name is the simulator's name in the config file.
const Name = "sim"

// Kind is the simulator, "sim" in the config: in process, or served over
// HTTP (msgq sim serve, base_url set), where it speaks the http API and its
// Standard Webhooks.
var Kind = provider.Kind{
	Name:       Name,
	Channels:   []string{store.ChannelWhatsApp, store.ChannelSMS},
	Address:    provider.AddressPhone,
	Idempotent: true, // DefaultConfig: the http API's semantics
	Decode:     decode,
	Codes: []provider.Code{
		{Code: "invalid_recipient", Class: retry.Permanent, Meaning: "the permanent fault"},
		{Code: "pair_rate_limited", Class: retry.RateLimited, Meaning: "the pair fault: that recipient only"},
		{Code: "429", Class: retry.RateLimited, Meaning: "the 429 fault"},
		{Code: "5xx", Class: retry.Transient, Meaning: "the 5xx fault"},
	},
	Webhook: &webhook,
}

// webhook is the http API's, verified with the sim identity's secret.
var webhook = func() provider.Webhook {
	w := httpapi.Webhook
	w.Verifier = func(ps provider.Settings, getenv func(string) string) (provider.Verifier, error) {
		return httpapi.SecretVerifier(ps.(*Settings).WebhookSecretEnv, getenv)
	}
	return w
}()

// Settings is a sim identity's configuration: all optional.
type Settings struct {
	// BaseURL is a simulator served over HTTP; "" the in-process one.
	BaseURL string
	// WebhookSecretEnv names the variable holding the Standard Webhooks
	// secret the served simulator signs with.
	WebhookSecretEnv string
}

func decode(raw map[string]any) (provider.Settings, error) {
	if err := provider.Strict(Name, raw, []string{"base_url", "webhook_secret_env"}, httpapi.NotWhatsApp(Name)); err != nil {
		return nil, err
	}
	var s Settings
	var err error
	if s.BaseURL, err = provider.String(raw, "base_url"); err != nil {
		return nil, err
	}
	if s.WebhookSecretEnv, err = provider.String(raw, "webhook_secret_env"); err != nil {
		return nil, err
	}
	return &s, nil
}

// SendEnv is none: the simulator needs no token.
func (s *Settings) SendEnv() []provider.Env { return nil }

// WebhookEnv is the webhook secret, when configured.
func (s *Settings) WebhookEnv() []provider.Env { return httpapi.SecretEnv(s.WebhookSecretEnv) }

// New builds the in-process simulator, or an http API client of a served
// one.
func (s *Settings) New(func(string) string) (provider.Provider, error) {
	if s.BaseURL != "" {
		return httpapi.New(httpapi.Config{BaseURL: s.BaseURL, Token: "sim"}), nil
	}
	return New(DefaultConfig()).Provider(), nil
}

// Sender is none.
func (s *Settings) Sender() (string, string) { return "", "" }

// Account is none.
func (s *Settings) Account() string { return "" }

// ServiceWindow is none unless configured.
func (s *Settings) ServiceWindow() time.Duration { return 0 }
