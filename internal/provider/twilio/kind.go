package twilio

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

// Kind is Twilio Programmable Messaging for SMS, "twilio" in the config:
// sends through the Messages API, status callbacks and inbound SMS through
// its webhook (verified with the auth token, docs/providers.md).
var Kind = provider.Kind{
	Name:     ProviderName,
	Channels: []string{store.ChannelSMS},
	Address:  provider.AddressPhone,
	// No idempotency key on the Messages API: an ambiguous call is
	// unknown, never repeated (docs/providers.md).
	Idempotent: false,
	Decode:     decode,
	OptedOutOn: OptedOut,
	// A failure callback whose code is the identity's carries a notice
	// (identityNotice) that pauses it.
	PausesOn: pausesOn,
	Webhook: &provider.Webhook{
		Name:      ProviderName,
		SecretKey: "auth_token_env",
		// Twilio's signature has no timestamp and no parts to tell apart:
		// a 401 says no more than "signature refused".
		TellWhy:   false,
		Headers:   []string{SignatureHeader, "Content-Type", "User-Agent", "I-Twilio-Idempotency-Token"},
		Verifier:  verifier,
		Parse:     parseStored,
		KeepsCall: true,
		Body:      "form-encoded, a status callback or an inbound SMS",
		Dedupe:    dedupeKey,
	},
	Codes: []provider.Code{
		{Code: "20003, 20005, 20404, 30002", Class: retry.Identity, Meaning: "credentials refused, account inactive or suspended"},
		{Code: "21212, 21601, 21603, 21606, 21661, 21703, 21704, 30032, 30034", Class: retry.Identity, Meaning: "the sender (From or Messaging Service) is refused"},
		{Code: "20429, 429", Class: retry.RateLimited, Meaning: "too many requests (Retry-After honoured)"},
		{Code: "30001", Class: retry.RateLimited, Meaning: "queue overflow (at least a minute)"},
		{Code: "21610", Class: retry.Permanent, Meaning: "the recipient replied STOP: an opt-out"},
		{Code: "21211, 21408, 21602, 21604, 21608, 21612, 21614, 21617", Class: retry.Permanent, Meaning: "recipient or message refused for good"},
		{Code: "30004, 30005, 30006, 30007", Class: retry.Permanent, Meaning: "delivery failed after acceptance"},
		{Code: "30003, 30008", Class: retry.Transient, Meaning: "unreachable for now, after acceptance"},
		{Code: "5xx, timeout after the request was written", Class: retry.Ambiguous, Meaning: "may have been created: unknown, reconcile looks it up"},
	},
}

var settingKeys = []string{"base_url", "account_sid_env", "auth_token_env", "api_key_sid_env", "api_key_secret_env",
	"from", "messaging_service_sid", "status_callback"}

// Settings is a twilio identity's configuration. The Account SID and the
// auth token come from the environment: the token is a secret, and the SID
// travels with it. An API key (api_key_sid_env, api_key_secret_env: an SK
// key and its secret, which Twilio recommends for production because it can
// be revoked alone) authenticates the sends instead of the auth token; the
// auth token is then needed only to verify webhooks, which Twilio signs with
// it and nothing else.
type Settings struct {
	BaseURL, AccountSIDEnv, AuthTokenEnv, APIKeySIDEnv, APIKeySecretEnv string
	From, MessagingServiceSID, StatusCallback                           string
}

func decode(raw map[string]any) (provider.Settings, error) {
	if err := provider.Strict(ProviderName, raw, settingKeys, nil); err != nil {
		return nil, err
	}
	var s Settings
	if err := provider.Strings(raw, provider.StringSetting{Key: "base_url", Dst: &s.BaseURL}, provider.StringSetting{Key: "account_sid_env", Dst: &s.AccountSIDEnv}, provider.StringSetting{Key: "auth_token_env", Dst: &s.AuthTokenEnv},
		provider.StringSetting{Key: "api_key_sid_env", Dst: &s.APIKeySIDEnv}, provider.StringSetting{Key: "api_key_secret_env", Dst: &s.APIKeySecretEnv},
		provider.StringSetting{Key: "from", Dst: &s.From}, provider.StringSetting{Key: "messaging_service_sid", Dst: &s.MessagingServiceSID}, provider.StringSetting{Key: "status_callback", Dst: &s.StatusCallback}); err != nil {
		return nil, err
	}
	switch {
	case (s.APIKeySIDEnv == "") != (s.APIKeySecretEnv == ""):
		return nil, fmt.Errorf("provider twilio needs both api_key_sid_env and api_key_secret_env, or neither")
	case s.AccountSIDEnv == "" || s.AuthTokenEnv == "" && s.APIKeySIDEnv == "":
		return nil, fmt.Errorf("provider twilio needs account_sid_env and auth_token_env, or account_sid_env and an API key (api_key_sid_env, api_key_secret_env): the environment variables holding them")
	case (s.From == "") == (s.MessagingServiceSID == ""):
		return nil, fmt.Errorf("provider twilio needs exactly one of from and messaging_service_sid")
	}
	return &s, nil
}

// SendEnv is the Account SID and the API key, else the auth token.
func (s *Settings) SendEnv() []provider.Env {
	if s.APIKeySIDEnv != "" {
		return []provider.Env{{Key: "account_sid_env", Name: s.AccountSIDEnv},
			{Key: "api_key_sid_env", Name: s.APIKeySIDEnv}, {Key: "api_key_secret_env", Name: s.APIKeySecretEnv}}
	}
	return []provider.Env{{Key: "account_sid_env", Name: s.AccountSIDEnv}, {Key: "auth_token_env", Name: s.AuthTokenEnv}}
}

// WebhookEnv is the auth token: Twilio signs its webhooks with it (never
// with an API key). None when the identity names none: its webhooks are not
// received.
func (s *Settings) WebhookEnv() []provider.Env {
	if s.AuthTokenEnv == "" {
		return nil
	}
	return []provider.Env{{Key: "auth_token_env", Name: s.AuthTokenEnv}}
}

// ReportsProgress says Twilio posts status callbacks for the identity's
// sends: only to a status_callback (provider.ProgressReporter).
func (s *Settings) ReportsProgress() bool { return s.StatusCallback != "" }

// New builds the client with the credentials from the environment.
func (s *Settings) New(getenv func(string) string) (provider.Provider, error) {
	cfg := Config{BaseURL: s.BaseURL, AccountSID: getenv(s.AccountSIDEnv),
		From: s.From, MessagingServiceSID: s.MessagingServiceSID, StatusCallback: s.StatusCallback}
	// The API key when the identity has one: the auth token is then only
	// the webhooks' (WebhookEnv), and stays out of the client.
	if s.APIKeySIDEnv != "" {
		cfg.APIKeySID, cfg.APIKeySecret = getenv(s.APIKeySIDEnv), getenv(s.APIKeySecretEnv)
	} else if s.AuthTokenEnv != "" {
		cfg.AuthToken = getenv(s.AuthTokenEnv)
	}
	if cfg.AccountSID == "" && cfg.AuthToken == "" && cfg.APIKeySID == "" && cfg.APIKeySecret == "" {
		// A getenv that knows nothing (provider.Settings.New): a client
		// good for the kind's properties (not idempotent, a Lookuper
		// and a Finder, which reconcile asks before it reads any secret)
		// and for nothing else: with no account it has no Messages URL,
		// so every call fails as Identity without a request.
		return New(cfg), nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("provider twilio: %w", err)
	}
	return New(cfg), nil
}

// Sender is the From number or the Messaging Service.
func (s *Settings) Sender() (string, string) {
	if s.From != "" {
		return "from", s.From
	}
	return "messaging_service_sid", s.MessagingServiceSID
}

// Account is none: SMS has no shared templates.
func (s *Settings) Account() string { return "" }

// ServiceWindow is none: SMS has no customer-service window.
func (s *Settings) ServiceWindow() time.Duration { return 0 }
