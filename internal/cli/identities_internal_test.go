package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/health"
)

// TestIdentitiesJSONFieldsArePinned pins identities -o json (docs/json.md)
// and stats' queued_unsendable items. Add, never rename.
func TestIdentitiesJSONFieldsArePinned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    any
		want []string
	}{
		{"an identity", identityRow{}, []string{"channels", "configured", "daily_recipients_limit", "daily_recipients_used", "last_notice", "missing_env", "name", "paused", "paused_at", "paused_reason",
			"per_recipient_default", "per_recipient_interval", "provider", "queued", "quiet_hours", "quiet_zone", "rate", "rate_default", "sending", "sends_here",
			"service_window", "template_holds", "unknown", "webhooks"}},
		{"a queue that cannot send from here", health.Unsendable{}, []string{"identity", "queued", "why"}},
	} {
		if got := jsonKeys(t, tc.v); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JSON fields %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestParseIdentityChannelsAndPacing: the channels an identity sends on
// and the pacing it gets, by provider, default and override.
func TestParseIdentityChannelsAndPacing(t *testing.T) {
	t.Parallel()
	wa := identityConfig{Provider: "whatsapp", Settings: map[string]any{"phone_number_id": "1", "token_env": "T"}}
	for _, tc := range []struct {
		name string
		ic   identityConfig
		want string // channels, rate (spacing, default), per recipient (interval, default)
	}{
		{"whatsapp gets WhatsApp's limits", wa, "[whatsapp] 80/s 12.5ms true 6s 6s true"},
		{"whatsapp, limits off", with(wa, func(c *identityConfig) { c.Rate, c.PerRecipientInterval = "off", "off" }),
			"[whatsapp] off 0s false off 0s false"},
		{"whatsapp, its own limits", with(wa, func(c *identityConfig) { c.Rate, c.PerRecipientInterval = "1000/s", "1s" }),
			"[whatsapp] 1000/s 1ms false 1s 1s false"},
		{"whatsapp, channel whatsapp", with(wa, func(c *identityConfig) { c.Channel = "whatsapp" }), "[whatsapp] 80/s 12.5ms true 6s 6s true"},
		{"http, no channel: either", identityConfig{Provider: "http", Settings: map[string]any{"base_url": "http://x", "token_env": "T"}},
			"[whatsapp sms] off 0s false off 0s false"},
		{"sim, channel sms", identityConfig{Provider: "sim", Channel: "sms"}, "[sms] off 0s false off 0s false"},
	} {
		id, err := parseIdentity("x", tc.ic)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		got := fmt.Sprintf("%v %s %s %v %s %s %v", id.Channels, id.Rate, id.Pacing.Spacing, id.RateDefault,
			id.PerRecipient, id.Pacing.PerRecipient, id.PerRecipientDefault)
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		id   string
		ic   identityConfig
		want string
	}{
		{"sms on a WhatsApp number", "x", with(wa, func(c *identityConfig) { c.Channel = "sms" }), "sends on channel whatsapp only"},
		{"a newline in the name", "a\nb", wa, "names are 1 to 64 characters"},
		{"a control character in the name", "a\x1bb", wa, "names are 1 to 64 characters"},
		{"a rate that is neither a rate nor off", "x", with(wa, func(c *identityConfig) { c.Rate = "of" }), `rate "of" is not like 80/s`},
		{"an interval that is neither", "x", with(wa, func(c *identityConfig) { c.PerRecipientInterval = "6" }), "(or off)"},
	} {
		if _, err := parseIdentity(tc.id, tc.ic); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func with(ic identityConfig, change func(*identityConfig)) identityConfig {
	change(&ic)
	return ic
}

// TestASpecsChannelDefaultsToItsIdentitys: the channel a row gets, from
// the identity when --channel is not given.
func TestASpecsChannelDefaultsToItsIdentitys(t *testing.T) {
	t.Parallel()
	ids, err := parseIdentities(map[string]identityConfig{
		"shop":  {Provider: "whatsapp", Settings: map[string]any{"phone_number_id": "1", "token_env": "T"}},
		"texts": {Provider: "sim", Channel: "sms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ identity, channel, want string }{
		{"shop", "", "whatsapp"}, {"texts", "", "sms"}, {"sim", "", "whatsapp"}, {"sim", "sms", "sms"},
		{"shop", "sms", "channel: identity shop (provider whatsapp) does not send on sms (it sends on whatsapp)"},
		{"shpo", "", `identity: "shpo" is not configured (known: shop, sim, texts)`},
		{"shop", "fax", `channel: must be whatsapp, sms or email (got "fax")`},
	} {
		s := sendSpec{Key: "k", To: "+15551234567", Text: "hi", Identity: tc.identity, Channel: tc.channel}
		p, err := s.params(time.Now(), sendDefaults{Tenant: "default", Identities: ids})
		got := p.Channel
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("identity %s, channel %q: %s, want %s", tc.identity, tc.channel, got, tc.want)
		}
	}
}

// TestIdentityDurationsTakeTheOneGrammar: the identities' durations read
// parseDuration's grammar (days included), like every flag (issue 13 §4).
func TestIdentityDurationsTakeTheOneGrammar(t *testing.T) {
	t.Parallel()
	ic := identityConfig{Provider: "http", Settings: map[string]any{"base_url": "http://x", "token_env": "T"}, ServiceWindow: "1d",
		PerRecipientInterval: "1d12h"}
	ic.Retry.Base, ic.Retry.Cap = "1d", "2d"
	id, err := parseIdentity("x", ic)
	if err != nil {
		t.Fatal(err)
	}
	if id.Window != 24*time.Hour || id.Pacing.PerRecipient != 36*time.Hour || id.Policy.Base != 24*time.Hour || id.Policy.Cap != 48*time.Hour {
		t.Errorf("window %s, per recipient %s, retry base %s cap %s", id.Window, id.Pacing.PerRecipient, id.Policy.Base, id.Policy.Cap)
	}
	ic.ServiceWindow = "1x"
	if _, err := parseIdentity("x", ic); err == nil {
		t.Error("service_window 1x was accepted")
	}
}

// TestATwilioIdentityExpectsProgressOnlyWithAStatusCallback: every twilio
// identity receives webhooks (inbound SMS, verified with its auth token),
// but only one with a status_callback gets statuses, so only its accepted
// sends are expected to progress (stats, health).
func TestATwilioIdentityExpectsProgressOnlyWithAStatusCallback(t *testing.T) {
	t.Parallel()
	tw := map[string]any{"account_sid_env": "S", "auth_token_env": "T", "from": "+15005550006"}
	withCB := map[string]any{"status_callback": "https://hooks.example.com/webhooks/twilio/loud"}
	for k, v := range tw {
		withCB[k] = v
	}
	ids := map[string]*identity{}
	for name, settings := range map[string]map[string]any{"quiet": tw, "loud": withCB} {
		id, err := parseIdentity(name, identityConfig{Provider: "twilio", Settings: settings})
		if err != nil {
			t.Fatal(err)
		}
		if !id.receivesWebhooks() {
			t.Errorf("%s does not receive webhooks", name)
		}
		ids[name] = id
	}
	if got := progressIdentities(ids); !slices.Equal(got, []string{"loud"}) {
		t.Errorf("progress identities %v, want the one with a status_callback", got)
	}
}
