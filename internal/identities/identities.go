// Package identities is the sending identities' configuration: the
// config file's identities: section read, validated and turned into what
// the rest of msgq acts on (the provider a drain calls with, its pacing,
// retry policy, quiet hours and limits), and which of them this process
// can act for (the secrets its environment holds).
package identities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/kinds"
	"github.com/msgq/msgq/internal/quiet"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook"
)

// BuiltinSim is the identity that exists with no configuration at all: the
// in-process simulator, so the quick start runs on a fresh machine.
const BuiltinSim = "sim"

// Grammar is what an identity name may be: the grammar of keys
// (store.ValidKey), so a name is safe in a table cell, a log line, a
// Prometheus label and a file name, and never carries a newline or a
// control character.
const Grammar = "1 to 64 characters of A-Za-z0-9._:-"

// Off turns a pacing limit off.
const Off = "off"

// Config is one entry under `identities:` in the config file: the
// settings every identity has, and its provider's own (Settings), which
// its kind decodes strictly (provider.Kind.Decode).
type Config struct {
	Provider             string  `mapstructure:"provider"`
	Channel              string  `mapstructure:"channel"`
	Rate                 string  `mapstructure:"rate"`
	PerRecipientInterval string  `mapstructure:"per_recipient_interval"`
	PacingHeadroom       float64 `mapstructure:"pacing_headroom"`
	// ServiceWindow is the customer-service window: free-form text goes
	// out only this long after the recipient last wrote. Default: the
	// kind's (WhatsApp: 24h when msgq receives its webhooks), off
	// otherwise; "off" turns it off.
	ServiceWindow string `mapstructure:"service_window"`
	// QuietHours is a daily window "HH:MM-HH:MM" of the recipient's local
	// time in which due rows wait for its end (internal/quiet), read in
	// the number's own zone, or in QuietZone for email and for numbers
	// whose country spans several zones. QuietExempt names the lanes and
	// purposes that go out all the same.
	QuietHours  string `mapstructure:"quiet_hours"`
	QuietZone   string `mapstructure:"quiet_zone"`
	QuietExempt struct {
		Lanes    []string `mapstructure:"lanes"`
		Purposes []string `mapstructure:"purposes"`
	} `mapstructure:"quiet_exempt"`
	// DailyRecipients is the daily unique-recipient limit: once the
	// identity has been claimed for this many recipients within 24
	// hours, rows to other recipients wait (0: no limit).
	DailyRecipients int `mapstructure:"daily_recipients"`
	// MaxSegments refuses SMS texts longer than this many segments at
	// send (exit 2): each segment is billed as one message, so a template
	// gone wrong or an emoji that turns a text into UCS-2 is caught before
	// it costs anything. 0: no limit. Only for identities that send on sms.
	MaxSegments int `mapstructure:"max_segments"`
	Retry       struct {
		Base        string  `mapstructure:"base"`
		Cap         string  `mapstructure:"cap"`
		Factor      float64 `mapstructure:"factor"`
		MaxAttempts int     `mapstructure:"max_attempts"`
	} `mapstructure:"retry"`
	// Settings are the other keys: the provider's (base_url, token_env,
	// app_secret_env, ...).
	Settings map[string]any `mapstructure:",remain"`
}

// Identity is a configured identity, validated.
type Identity struct {
	Name   string
	Config Config
	// Kind is its provider's kind; Settings its provider's settings, as
	// the kind decoded them.
	Kind     *provider.Kind
	Settings provider.Settings
	Policy   retry.Policy
	Pacing   store.Pacing
	// Rate and PerRecipient are the limits in force, for display: as
	// written, the provider's default, or "off"; RateDefault and
	// PerRecipientDefault say the provider's default applies.
	Rate, PerRecipient               string
	RateDefault, PerRecipientDefault bool
	// Channels are the channels the identity sends on, its default first.
	Channels []string
	// Window is the customer-service window (0: none is enforced).
	Window time.Duration
	// Quiet is the identity's quiet hours (the zero Policy: none).
	Quiet quiet.Policy
	// DailyRecipients is the daily unique-recipient limit (0: none).
	DailyRecipients int
}

// SendsOn says whether the identity sends on channel.
func (id *Identity) SendsOn(channel string) bool {
	return slices.Contains(id.Channels, channel)
}

// MissingSendEnv names the environment variables the identity needs to
// send (its token) that are not set in this process.
func (id *Identity) MissingSendEnv() []string {
	return provider.MissingEnv(id.Settings.SendEnv(), os.Getenv)
}

// MissingWebhookEnv names the environment variables the identity's webhook
// verification needs that are not set in this process.
func (id *Identity) MissingWebhookEnv() []string {
	return provider.MissingEnv(id.Settings.WebhookEnv(), os.Getenv)
}

// ReceivesWebhooks says msgq receives the identity's webhooks (its kind
// sends them and its config names their secret).
func (id *Identity) ReceivesWebhooks() bool {
	return id.Kind.Webhook != nil && len(id.Settings.WebhookEnv()) > 0 && id.WebhookSecretNamed()
}

// WebhookSecretNamed says the config names the secret that verifies the
// deliveries (not only, say, WhatsApp's verify token).
func (id *Identity) WebhookSecretNamed() bool {
	for _, e := range id.Settings.WebhookEnv() {
		if e.Key == id.Kind.Webhook.SecretKey {
			return true
		}
	}
	return false
}

// WebhookPath is where its provider posts the identity's webhooks: its
// format's shared path (the one providers are configured with today), ""
// when msgq does not receive them.
func (id *Identity) WebhookPath() string {
	if !id.ReceivesWebhooks() {
		return ""
	}
	return webhook.PathPrefix + id.Kind.Webhook.Name
}

// Names lists the configured identities, sorted, for messages
// that name the known ones.
func Names(ids map[string]*Identity) string {
	return strings.Join(slices.Sorted(maps.Keys(ids)), ", ")
}

// Unknown is the error for a name that is not configured: bad
// input, naming the identities that are.
func Unknown(name string, ids map[string]*Identity) error {
	if !store.ValidKey(name) {
		return &store.InvalidError{Field: "identity", Msg: fmt.Sprintf("%q is not a valid name (%s)", name, Grammar)}
	}
	return &store.InvalidError{Field: "identity", Msg: fmt.Sprintf("%q is not configured (known: %s)", name, Names(ids))}
}

// Parse validates the identities section; the built-in sim is
// added unless the file defines one of that name.
func Parse(raw map[string]Config) (map[string]*Identity, error) {
	out := map[string]*Identity{}
	for name, ic := range raw {
		id, err := parseOne(name, ic)
		var unknown *provider.UnknownSettingError
		switch {
		case errors.As(err, &unknown):
			// Refused like a misspelt key of the file.
			return nil, configErrorf("config: identities: %s: %v", name, err)
		case err != nil:
			return nil, configErrorf("config: identity %s: %v", name, err)
		}
		out[name] = id
	}
	// Webhooks name the number they came through: two identities on one
	// number would make which one a reply or status is filed under a
	// matter of chance.
	byNumber := map[string]string{}
	for name, id := range out {
		key, n := id.Settings.Sender()
		if n == "" {
			continue
		}
		n = id.Kind.Name + " " + key + " " + n
		if other, ok := byNumber[n]; ok {
			a, b := min(name, other), max(name, other)
			return nil, configErrorf("config: identities %s and %s have the same %s %s", a, b, key, n[strings.LastIndexByte(n, ' ')+1:])
		}
		byNumber[n] = name
	}
	if _, ok := out[BuiltinSim]; !ok {
		s, err := sim.Kind.Decode(nil)
		if err != nil {
			panic(err) // the built-in sim has no settings to get wrong
		}
		out[BuiltinSim] = &Identity{Name: BuiltinSim, Config: Config{Provider: sim.Name}, Kind: &sim.Kind, Settings: s,
			Policy: retry.DefaultPolicy(), Rate: Off, PerRecipient: Off, Channels: slices.Clone(sim.Kind.Channels)}
	}
	return out, nil
}

func parseOne(name string, ic Config) (*Identity, error) {
	if !store.ValidKey(name) {
		return nil, fmt.Errorf("names are %s", Grammar)
	}
	id := &Identity{Name: name, Config: ic, Policy: retry.DefaultPolicy()}
	if ic.Provider == "" {
		return nil, fmt.Errorf("provider is required (%s)", kinds.Names())
	}
	kind, ok := kinds.ByName(ic.Provider)
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (want %s)", ic.Provider, kinds.Names())
	}
	settings, err := kind.Decode(ic.Settings)
	if err != nil {
		return nil, err
	}
	id.Kind, id.Settings = kind, settings
	switch ic.ServiceWindow {
	case "":
		id.Window = settings.ServiceWindow()
	case "off":
	default:
		d, err := duration.Parse(ic.ServiceWindow)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("service_window %q is not a duration like 24h (or off)", ic.ServiceWindow)
		}
		id.Window = d
	}
	if id.Quiet, err = parseQuiet(ic); err != nil {
		return nil, err
	}
	if ic.DailyRecipients < 0 {
		return nil, fmt.Errorf("daily_recipients %d must be a positive number of recipients (e.g. 250), or 0 for no limit", ic.DailyRecipients)
	}
	id.DailyRecipients = ic.DailyRecipients
	// The channels it sends on: the one configured, which its kind must
	// send on, or every one the kind sends on.
	switch all := kinds.Channels(); {
	case ic.Channel != "" && !slices.Contains(all, ic.Channel):
		return nil, fmt.Errorf("channel must be %s (got %q)", kinds.OrList(all), ic.Channel)
	case ic.Channel != "" && !kind.SendsOn(ic.Channel):
		return nil, fmt.Errorf("provider %s sends on channel %s only (got channel %s)", kind.Name, kinds.OrList(kind.Channels), ic.Channel)
	case ic.Channel != "":
		id.Channels = []string{ic.Channel}
	default:
		id.Channels = slices.Clone(kind.Channels)
	}
	rate, perRcpt := ic.Rate, ic.PerRecipientInterval
	if rate == "" && kind.Rate != "" {
		rate, id.RateDefault = kind.Rate, true
	}
	if perRcpt == "" && kind.PerRecipient != "" {
		perRcpt, id.PerRecipientDefault = kind.PerRecipient, true
	}
	id.Rate, id.PerRecipient = Off, Off
	if rate != "" && rate != Off {
		spacing, err := parseRate(rate)
		if err != nil {
			return nil, err
		}
		id.Pacing.Spacing, id.Rate = spacing, rate
	}
	switch {
	case ic.MaxSegments < 0:
		return nil, fmt.Errorf("max_segments %d must be a number of SMS segments (0: no limit)", ic.MaxSegments)
	case ic.MaxSegments > 0 && !id.SendsOn(store.ChannelSMS):
		return nil, fmt.Errorf("max_segments limits SMS texts, and this identity sends on %s only", kinds.OrList(id.Channels))
	}
	if h := ic.PacingHeadroom; h < 0 || h >= 1 {
		return nil, fmt.Errorf("pacing_headroom %v must be a share in [0, 1), e.g. 0.1", h)
	}
	if perRcpt != "" && perRcpt != Off {
		d, err := duration.Parse(perRcpt)
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
		d, err := duration.Parse(f.v)
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

// parseQuiet reads the quiet-hours settings. A zone is required with a
// window: email has no zone of its own, nor has a number whose country
// spans several, and a window read in a guessed zone wakes people up.
func parseQuiet(ic Config) (quiet.Policy, error) {
	var p quiet.Policy
	ex := ic.QuietExempt
	if ic.QuietHours == "" {
		if ic.QuietZone != "" || len(ex.Lanes) > 0 || len(ex.Purposes) > 0 {
			return p, fmt.Errorf("quiet_zone and quiet_exempt need quiet_hours (a window like 21:00-08:00)")
		}
		return p, nil
	}
	w, err := quiet.Parse(ic.QuietHours)
	if err != nil {
		return p, fmt.Errorf("quiet_hours: %v", err)
	}
	if ic.QuietZone == "" {
		return p, fmt.Errorf("quiet_hours needs quiet_zone (an IANA zone like Europe/Berlin): the zone for email and for numbers whose country spans several zones")
	}
	zone, err := time.LoadLocation(ic.QuietZone)
	if err != nil || ic.QuietZone == "Local" {
		return p, fmt.Errorf("quiet_zone %q is not an IANA time zone like Europe/Berlin", ic.QuietZone)
	}
	for _, l := range ex.Lanes {
		if l != store.LaneReply && l != store.LaneBulk {
			return p, fmt.Errorf("quiet_exempt.lanes: %q is not a lane (reply or bulk)", l)
		}
	}
	for _, pu := range ex.Purposes {
		if pu == "" {
			return p, fmt.Errorf("quiet_exempt.purposes: an empty purpose")
		}
	}
	return quiet.Policy{Window: &w, Zone: zone, ExemptLanes: ex.Lanes, ExemptPurposes: ex.Purposes}, nil
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

// Provider builds the identity's provider. Secrets come from the
// environment at this point and go nowhere but the provider's requests.
func (id *Identity) Provider() (provider.Provider, error) {
	for _, e := range id.Settings.SendEnv() {
		if e.Name != "" && os.Getenv(e.Name) == "" {
			return nil, configErrorf("identity %s: environment variable %s (%s) is not set", id.Name, e.Name, e.Key)
		}
	}
	p, err := id.Settings.New(os.Getenv)
	if err != nil {
		return nil, configErrorf("identity %s: %v", id.Name, oneLine(err.Error()))
	}
	return p, nil
}

// DedupesByKey says whether the identity's provider deduplicates sends by
// key: a property of its kind, known without its token.
func (id *Identity) DedupesByKey() bool {
	return id.Tokenless().Idempotent()
}

// Tokenless builds the identity's provider without any secret: good for
// its kind's properties (does it deduplicate, can it look up), never
// called.
func (id *Identity) Tokenless() provider.Provider {
	p, err := id.Settings.New(func(string) string { return "" })
	if err != nil {
		// A kind that cannot be built without its secrets has only
		// its declared properties.
		return kindOnly{id.Kind}
	}
	return p
}

// kindOnly is a kind's declared properties as a provider that never sends.
type kindOnly struct{ k *provider.Kind }

func (k kindOnly) Send(context.Context, *provider.Message) provider.Result {
	return provider.Result{Class: retry.Transient, RawError: "not built: its secrets are not set here"}
}
func (k kindOnly) Idempotent() bool { return k.k.Idempotent }

// Skipped is a configured identity this process cannot act for:
// the secrets it needs are not in its environment.
type Skipped struct {
	Name    string
	Missing []string // the unset variables, each with its config key
}

// ConfigError is an identity's configuration msgq refuses, or a secret
// its environment lacks where one was required: bad input, nothing was
// written.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, a ...any) error { return &ConfigError{fmt.Sprintf(format, a...)} }

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// MailTemplater is the identity's templates directory, if its kind has one.
func (id *Identity) MailTemplater() (provider.MailTemplater, bool) {
	if id == nil {
		return nil, false
	}
	mt, ok := id.Settings.(provider.MailTemplater)
	return mt, ok
}
