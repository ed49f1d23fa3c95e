package whatsapp

import (
	"crypto/subtle"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// Limits of the Cloud API that an identity gets unless its config says
// otherwise ("off" turns one off): 80 messages a second per business
// number by default, and one message every 6 seconds to one user (a burst
// borrows from later quota and ends in error 131056).
const (
	DefaultRate         = "80/s"
	DefaultPerRecipient = "6s"
)

// Name is the provider's name in the config file and in stored deliveries.
const Name = "whatsapp"

// Kind is the WhatsApp Cloud API provider, "whatsapp" in the config.
var Kind = provider.Kind{
	Name: Name,
	// A WhatsApp number sends WhatsApp messages and nothing else.
	Channels:     []string{store.ChannelWhatsApp},
	Address:      provider.AddressPhone,
	Idempotent:   false, // the Cloud API takes no idempotency key
	Rate:         DefaultRate,
	PerRecipient: DefaultPerRecipient,
	Decode:       decode,
	Codes:        codes(),
	PausesOn: func(code string) bool {
		c, err := strconv.ParseInt(code, 10, 64)
		if err != nil {
			return false
		}
		class, _, _ := CodeClass(c)
		return class == retry.Identity
	},
	Webhook: &provider.Webhook{
		Name:        Name,
		SecretKey:   "app_secret_env",
		TellWhy:     false,
		Headers:     []string{"X-Hub-Signature-256", "Content-Type", "User-Agent"},
		Verifier:    verifier,
		Parse:       func(body []byte, _ map[string]string) (*payload.Batch, error) { return payload.WhatsApp(body) },
		NamesSender: true,
	},
}

// settingKeys are the config keys of a whatsapp identity, beyond the
// common ones (channel, rate, retry, ...).
var settingKeys = []string{"base_url", "phone_number_id", "token_env", "app_secret_env", "verify_token_env"}

// Settings is a whatsapp identity's configuration.
type Settings struct {
	BaseURL       string
	PhoneNumberID string
	// TokenEnv, AppSecretEnv and VerifyTokenEnv name the environment
	// variables holding the access token, the app secret (webhook
	// signatures) and the verify token (Meta's subscription handshake).
	TokenEnv, AppSecretEnv, VerifyTokenEnv string
}

func decode(raw map[string]any) (provider.Settings, error) {
	err := provider.Strict(Name, raw, settingKeys, func(k string) string {
		if k == "webhook_secret_env" {
			return "webhook_secret_env is for the http provider; whatsapp signs with app_secret_env"
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	var s Settings
	if err := provider.Strings(raw, provider.StringSetting{Key: "base_url", Dst: &s.BaseURL}, provider.StringSetting{Key: "phone_number_id", Dst: &s.PhoneNumberID}, provider.StringSetting{Key: "token_env", Dst: &s.TokenEnv},
		provider.StringSetting{Key: "app_secret_env", Dst: &s.AppSecretEnv}, provider.StringSetting{Key: "verify_token_env", Dst: &s.VerifyTokenEnv}); err != nil {
		return nil, err
	}
	switch {
	case s.PhoneNumberID == "":
		return nil, fmt.Errorf("provider whatsapp needs phone_number_id")
	case s.TokenEnv == "":
		return nil, fmt.Errorf("provider whatsapp needs token_env (the environment variable holding its token)")
	}
	return &s, nil
}

// SendEnv is the token.
func (s *Settings) SendEnv() []provider.Env {
	return []provider.Env{{Key: "token_env", Name: s.TokenEnv}}
}

// WebhookEnv is the app secret and the verify token, those configured.
func (s *Settings) WebhookEnv() []provider.Env {
	var out []provider.Env
	if s.AppSecretEnv != "" {
		out = append(out, provider.Env{Key: "app_secret_env", Name: s.AppSecretEnv})
	}
	if s.VerifyTokenEnv != "" {
		out = append(out, provider.Env{Key: "verify_token_env", Name: s.VerifyTokenEnv})
	}
	return out
}

// New builds the client with the token from the environment.
func (s *Settings) New(getenv func(string) string) (provider.Provider, error) {
	return New(Config{BaseURL: s.BaseURL, PhoneNumberID: s.PhoneNumberID, Token: getenv(s.TokenEnv)}), nil
}

// Sender is the phone_number_id: Meta's webhooks name it in every change.
func (s *Settings) Sender() (string, string) { return "phone_number_id", s.PhoneNumberID }

// Account is the app secret's variable: identities of one Meta app share
// its business account, so its templates.
func (s *Settings) Account() string { return s.AppSecretEnv }

// ServiceWindow is WhatsApp's 24 h, but msgq only knows the window opened
// when it receives the inbound webhooks: without an app secret it never
// does, and enforcing the window would hold every text.
func (s *Settings) ServiceWindow() time.Duration {
	if s.AppSecretEnv != "" {
		return 24 * time.Hour
	}
	return 0
}

// Verifier checks Meta's X-Hub-Signature-256 with one identity's app
// secret, and answers the subscription handshake with its verify token.
type Verifier struct {
	AppSecret   []byte
	VerifyToken string
}

// verifier reads the identity's secrets; an identity without an app
// secret verifies nothing, so has no route.
func verifier(ps provider.Settings, getenv func(string) string) (provider.Verifier, error) {
	s := ps.(*Settings)
	if s.AppSecretEnv == "" {
		return nil, nil
	}
	v := &Verifier{AppSecret: []byte(getenv(s.AppSecretEnv))}
	if s.VerifyTokenEnv != "" {
		v.VerifyToken = getenv(s.VerifyTokenEnv)
	}
	return v, nil
}

const signatureHeader = "X-Hub-Signature-256"

// Precheck refuses a request that cannot be signed before its body is
// read, so an unsigned flood costs no memory.
func (v *Verifier) Precheck(d *provider.Delivery) error {
	return verify.WhatsAppHeader(d.Header.Get(signatureHeader))
}

// Verify checks the MAC over the raw body.
func (v *Verifier) Verify(d *provider.Delivery) error {
	return verify.WhatsApp(d.Body, d.Header.Get(signatureHeader), v.AppSecret)
}

// Handshake answers Meta's GET hub.mode=subscribe with hub.challenge when
// the token is this identity's.
func (v *Verifier) Handshake(q url.Values) (string, bool) {
	token := q.Get("hub.verify_token")
	ok := v.VerifyToken != "" && subtle.ConstantTimeCompare([]byte(v.VerifyToken), []byte(token)) == 1
	if q.Get("hub.mode") != "subscribe" || token == "" || !ok {
		return "", false
	}
	return q.Get("hub.challenge"), true
}

// codes is codeGroups as Kind.Codes rows, one per group.
func codes() []provider.Code {
	out := make([]provider.Code, 0, len(codeGroups))
	for _, g := range codeGroups {
		cs := make([]string, len(g.codes))
		for i, c := range g.codes {
			cs[i] = strconv.FormatInt(c, 10)
		}
		out = append(out, provider.Code{Code: strings.Join(cs, ", "), Class: g.class, Meaning: g.meaning})
	}
	return append(out, provider.Code{Code: "200-299", Class: retry.Identity, Meaning: "permission missing"})
}
