package cli

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/drain"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/httpapi"
	"github.com/msgq/msgq/internal/provider/whatsapp"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
)

// Providers an identity may use.
const (
	providerWhatsApp = "whatsapp"
	providerHTTP     = "http"
	providerSim      = "sim"
)

// builtinSim is the identity that exists with no configuration at all: the
// in-process simulator, so the quick start runs on a fresh machine.
const builtinSim = "sim"

// identityGrammar is what an identity name may be: the grammar of keys
// (store.ValidKey), so a name is safe in a table cell, a log line, a
// Prometheus label and a file name, and never carries a newline or a
// control character.
const identityGrammar = "1 to 64 characters of A-Za-z0-9._:-"

// WhatsApp's own limits (Cloud API): 80 messages a second per business
// number by default, and one message every 6 seconds to one user (a burst
// borrows from later quota and ends in error 131056). A whatsapp identity
// gets them unless its config says otherwise ("off" turns one off).
const (
	whatsappDefaultRate         = "80/s"
	whatsappDefaultPerRecipient = "6s"
)

// settingOff turns a pacing limit off.
const settingOff = "off"

// identityConfig is one entry under `identities:` in the config file.
type identityConfig struct {
	Provider             string  `mapstructure:"provider"`
	Channel              string  `mapstructure:"channel"`
	BaseURL              string  `mapstructure:"base_url"`
	PhoneNumberID        string  `mapstructure:"phone_number_id"`
	TokenEnv             string  `mapstructure:"token_env"`
	Rate                 string  `mapstructure:"rate"`
	PerRecipientInterval string  `mapstructure:"per_recipient_interval"`
	PacingHeadroom       float64 `mapstructure:"pacing_headroom"`
	// Webhooks (msgq webhook serve): the environment variables holding
	// WhatsApp's app secret and verify token, or the http provider's
	// Standard Webhooks secret(s) (whsec_..., space-separated to rotate).
	AppSecretEnv     string `mapstructure:"app_secret_env"`
	VerifyTokenEnv   string `mapstructure:"verify_token_env"`
	WebhookSecretEnv string `mapstructure:"webhook_secret_env"`
	// ServiceWindow is the customer-service window: free-form text goes
	// out only this long after the recipient last wrote. Default 24h for
	// a WhatsApp identity whose webhooks msgq receives (app_secret_env
	// set), off otherwise; "off" turns it off.
	ServiceWindow string `mapstructure:"service_window"`
	Retry         struct {
		Base        string  `mapstructure:"base"`
		Cap         string  `mapstructure:"cap"`
		Factor      float64 `mapstructure:"factor"`
		MaxAttempts int     `mapstructure:"max_attempts"`
	} `mapstructure:"retry"`
}

// identity is a configured identity, validated.
type identity struct {
	Name   string
	Config identityConfig
	Policy retry.Policy
	Pacing store.Pacing
	// Rate and PerRecipient are the limits in force, for display: as
	// written, the provider's default, or "off"; RateDefault and
	// PerRecipientDefault say the provider's default applies.
	Rate, PerRecipient               string
	RateDefault, PerRecipientDefault bool
	// Channels are the channels the identity sends on, its default first.
	Channels []string
	// Window is the customer-service window (0: none is enforced).
	Window time.Duration
}

// sendsOn says whether the identity sends on channel.
func (id *identity) sendsOn(channel string) bool {
	return slices.Contains(id.Channels, channel)
}

// missingSendEnv names the environment variables the identity needs to
// send (its token) that are not set in this process.
func (id *identity) missingSendEnv() []string {
	if id.Config.TokenEnv != "" && os.Getenv(id.Config.TokenEnv) == "" {
		return []string{id.Config.TokenEnv + " (token_env)"}
	}
	return nil
}

// missingWebhookEnv names the environment variables the identity's webhook
// verification needs that are not set in this process.
func (id *identity) missingWebhookEnv() []string {
	var out []string
	ic := id.Config
	for _, e := range []struct{ name, key string }{
		{ic.AppSecretEnv, "app_secret_env"}, {ic.VerifyTokenEnv, "verify_token_env"}, {ic.WebhookSecretEnv, "webhook_secret_env"},
	} {
		if e.name != "" && os.Getenv(e.name) == "" {
			out = append(out, e.name+" ("+e.key+")")
		}
	}
	return out
}

// identityNames lists the configured identities, sorted, for messages
// that name the known ones.
func identityNames(ids map[string]*identity) string {
	return strings.Join(slices.Sorted(maps.Keys(ids)), ", ")
}

// unknownIdentity is the error for a name that is not configured: bad
// input, naming the identities that are.
func unknownIdentity(name string, ids map[string]*identity) error {
	if !store.ValidKey(name) {
		return &store.InvalidError{Field: "identity", Msg: fmt.Sprintf("%q is not a valid name (%s)", name, identityGrammar)}
	}
	return &store.InvalidError{Field: "identity", Msg: fmt.Sprintf("%q is not configured (known: %s)", name, identityNames(ids))}
}

// parseIdentities validates the identities section; the built-in sim is
// added unless the file defines one of that name.
func parseIdentities(raw map[string]identityConfig) (map[string]*identity, error) {
	out := map[string]*identity{}
	for name, ic := range raw {
		id, err := parseIdentity(name, ic)
		if err != nil {
			return nil, usagef("config: identity %s: %v", name, err)
		}
		out[name] = id
	}
	// Webhooks name the number they came through: two identities on one
	// number would make which one a reply or status is filed under a
	// matter of chance.
	byNumber := map[string]string{}
	for name, id := range out {
		n := id.Config.PhoneNumberID
		if n == "" {
			continue
		}
		if other, ok := byNumber[n]; ok {
			a, b := min(name, other), max(name, other)
			return nil, usagef("config: identities %s and %s have the same phone_number_id %s", a, b, n)
		}
		byNumber[n] = name
	}
	if _, ok := out[builtinSim]; !ok {
		out[builtinSim] = &identity{Name: builtinSim, Config: identityConfig{Provider: providerSim}, Policy: retry.DefaultPolicy(),
			Rate: settingOff, PerRecipient: settingOff, Channels: []string{store.ChannelWhatsApp, store.ChannelSMS}}
	}
	return out, nil
}

func parseIdentity(name string, ic identityConfig) (*identity, error) {
	if !store.ValidKey(name) {
		return nil, fmt.Errorf("names are %s", identityGrammar)
	}
	id := &identity{Name: name, Config: ic, Policy: retry.DefaultPolicy()}
	switch ic.Provider {
	case providerWhatsApp:
		if ic.PhoneNumberID == "" {
			return nil, fmt.Errorf("provider whatsapp needs phone_number_id")
		}
		fallthrough
	case providerHTTP:
		if ic.TokenEnv == "" {
			return nil, fmt.Errorf("provider %s needs token_env (the environment variable holding its token)", ic.Provider)
		}
		if ic.Provider == providerHTTP && ic.BaseURL == "" {
			return nil, fmt.Errorf("provider http needs base_url")
		}
	case providerSim:
	case "":
		return nil, fmt.Errorf("provider is required (whatsapp, http or sim)")
	default:
		return nil, fmt.Errorf("unknown provider %q (want whatsapp, http or sim)", ic.Provider)
	}
	if (ic.AppSecretEnv != "" || ic.VerifyTokenEnv != "") && ic.Provider != providerWhatsApp {
		return nil, fmt.Errorf("app_secret_env and verify_token_env are for provider whatsapp; provider %s signs with webhook_secret_env", ic.Provider)
	}
	if ic.WebhookSecretEnv != "" && ic.Provider == providerWhatsApp {
		return nil, fmt.Errorf("webhook_secret_env is for the http provider; whatsapp signs with app_secret_env")
	}
	switch ic.ServiceWindow {
	case "":
		// WhatsApp's window is 24h, but msgq only knows it opened when
		// it receives the inbound webhooks: without an app secret it
		// never does, and enforcing the window would hold every text.
		if ic.Provider == providerWhatsApp && ic.AppSecretEnv != "" {
			id.Window = 24 * time.Hour
		}
	case "off":
	default:
		d, err := parseDuration(ic.ServiceWindow)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("service_window %q is not a duration like 24h (or off)", ic.ServiceWindow)
		}
		id.Window = d
	}
	// The channels it sends on: a WhatsApp number sends WhatsApp messages
	// and nothing else; the http API and the simulator carry the channel
	// in each request, so they send on the one configured, or on either.
	switch {
	case ic.Channel != "" && ic.Channel != store.ChannelWhatsApp && ic.Channel != store.ChannelSMS:
		return nil, fmt.Errorf("channel must be whatsapp or sms (got %q)", ic.Channel)
	case ic.Provider == providerWhatsApp && ic.Channel != "" && ic.Channel != store.ChannelWhatsApp:
		return nil, fmt.Errorf("provider whatsapp sends on channel whatsapp only (got channel %s)", ic.Channel)
	case ic.Provider == providerWhatsApp:
		id.Channels = []string{store.ChannelWhatsApp}
	case ic.Channel != "":
		id.Channels = []string{ic.Channel}
	default:
		id.Channels = []string{store.ChannelWhatsApp, store.ChannelSMS}
	}
	rate, perRcpt := ic.Rate, ic.PerRecipientInterval
	if ic.Provider == providerWhatsApp {
		if rate == "" {
			rate, id.RateDefault = whatsappDefaultRate, true
		}
		if perRcpt == "" {
			perRcpt, id.PerRecipientDefault = whatsappDefaultPerRecipient, true
		}
	}
	id.Rate, id.PerRecipient = settingOff, settingOff
	if rate != "" && rate != settingOff {
		spacing, err := parseRate(rate)
		if err != nil {
			return nil, err
		}
		id.Pacing.Spacing, id.Rate = spacing, rate
	}
	if h := ic.PacingHeadroom; h < 0 || h >= 1 {
		return nil, fmt.Errorf("pacing_headroom %v must be a share in [0, 1), e.g. 0.1", h)
	}
	if perRcpt != "" && perRcpt != settingOff {
		d, err := parseDuration(perRcpt)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("per_recipient_interval %q is not a duration like 6s (or off)", perRcpt)
		}
		id.Pacing.PerRecipient = d
		if d > 0 {
			id.PerRecipient = perRcpt
		}
	}
	r := ic.Retry
	for _, f := range []struct {
		v   string
		dst *time.Duration
		key string
	}{{r.Base, &id.Policy.Base, "retry.base"}, {r.Cap, &id.Policy.Cap, "retry.cap"}} {
		if f.v == "" {
			continue
		}
		d, err := parseDuration(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s %q is not a duration like 5s", f.key, f.v)
		}
		*f.dst = d
	}
	if r.Factor != 0 {
		id.Policy.Factor = r.Factor
	}
	if r.MaxAttempts != 0 {
		id.Policy.MaxAttempts = r.MaxAttempts
	}
	if err := id.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("retry: %v", oneLine(err.Error()))
	}
	return id, nil
}

// parseRate reads "80/s", "600/m" or "1000/h" and returns the spacing
// between calls that keeps to it.
func parseRate(s string) (time.Duration, error) {
	n, unit, ok := strings.Cut(s, "/")
	count, err := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err != nil || count <= 0 {
		return 0, fmt.Errorf("rate %q is not like 80/s, 600/m or 1000/h (or off)", s)
	}
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[strings.TrimSpace(unit)]
	if per == 0 {
		return 0, fmt.Errorf("rate %q: the unit is s, m or h", s)
	}
	return per / time.Duration(count), nil
}

// provider builds the identity's provider. Secrets come from the
// environment at this point and go nowhere but the provider's requests.
func (id *identity) provider() (provider.Provider, error) {
	ic := id.Config
	token := ""
	if ic.TokenEnv != "" {
		token = os.Getenv(ic.TokenEnv)
		if token == "" {
			return nil, usagef("identity %s: environment variable %s (token_env) is not set", id.Name, ic.TokenEnv)
		}
	}
	return id.build(token), nil
}

// dedupesByKey says whether the identity's provider deduplicates sends by
// key: a property of its kind, known without its token.
func (id *identity) dedupesByKey() bool {
	return id.build("").Idempotent()
}

func (id *identity) build(token string) provider.Provider {
	ic := id.Config
	switch ic.Provider {
	case providerWhatsApp:
		return whatsapp.New(whatsapp.Config{BaseURL: ic.BaseURL, PhoneNumberID: ic.PhoneNumberID, Token: token})
	case providerHTTP:
		return httpapi.New(httpapi.Config{BaseURL: ic.BaseURL, Token: token})
	}
	if ic.BaseURL != "" {
		// A sim served over HTTP (msgq sim serve) speaks the http API.
		return httpapi.New(httpapi.Config{BaseURL: ic.BaseURL, Token: "sim"})
	}
	return sim.New(sim.DefaultConfig()).Provider()
}

// skippedIdentity is a configured identity this process cannot act for:
// the secrets it needs are not in its environment.
type skippedIdentity struct {
	Name    string
	Missing []string // the unset variables, each with its config key
}

// drainIdentities builds the drain's view of the identities that can
// send from this process. An identity whose token is not in the
// environment is skipped (its rows stay queued, for a drain that has it),
// unless required names it: asked for by name, a missing token is bad
// input.
func drainIdentities(ids map[string]*identity, required bool) (map[string]*drain.Identity, []skippedIdentity, error) {
	out := map[string]*drain.Identity{}
	var skipped []skippedIdentity
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		id := ids[n]
		if miss := id.missingSendEnv(); len(miss) > 0 && !required {
			skipped = append(skipped, skippedIdentity{Name: n, Missing: miss})
			continue
		}
		p, err := id.provider()
		if err != nil {
			return nil, nil, err
		}
		out[n] = &drain.Identity{Name: n, Provider: p, Policy: id.Policy, Pacing: id.Pacing, Headroom: id.Config.PacingHeadroom}
	}
	return out, skipped, nil
}
