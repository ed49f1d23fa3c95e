package identities

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestParseIdentityChannelsAndPacing: the channels an identity sends on
// and the pacing it gets, by provider, default and override.
func TestParseIdentityChannelsAndPacing(t *testing.T) {
	t.Parallel()
	wa := Config{Provider: "whatsapp", Settings: map[string]any{"phone_number_id": "1", "token_env": "T"}}
	for _, tc := range []struct {
		name string
		ic   Config
		want string // channels, rate (spacing, default), per recipient (interval, default)
	}{
		{"whatsapp gets WhatsApp's limits", wa, "[whatsapp] 80/s 12.5ms true 6s 6s true"},
		{"whatsapp, limits off", with(wa, func(c *Config) { c.Rate, c.PerRecipientInterval = "off", "off" }),
			"[whatsapp] off 0s false off 0s false"},
		{"whatsapp, its own limits", with(wa, func(c *Config) { c.Rate, c.PerRecipientInterval = "1000/s", "1s" }),
			"[whatsapp] 1000/s 1ms false 1s 1s false"},
		{"whatsapp, channel whatsapp", with(wa, func(c *Config) { c.Channel = "whatsapp" }), "[whatsapp] 80/s 12.5ms true 6s 6s true"},
		{"http, no channel: either", Config{Provider: "http", Settings: map[string]any{"base_url": "http://x", "token_env": "T"}},
			"[whatsapp sms] off 0s false off 0s false"},
		{"sim, channel sms", Config{Provider: "sim", Channel: "sms"}, "[sms] off 0s false off 0s false"},
	} {
		id, err := parseOne("x", tc.ic)
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
		ic   Config
		want string
	}{
		{"sms on a WhatsApp number", "x", with(wa, func(c *Config) { c.Channel = "sms" }), "sends on channel whatsapp only"},
		{"a newline in the name", "a\nb", wa, "names are 1 to 64 characters"},
		{"a control character in the name", "a\x1bb", wa, "names are 1 to 64 characters"},
		{"a rate that is neither a rate nor off", "x", with(wa, func(c *Config) { c.Rate = "of" }), `rate "of" is not like 80/s`},
		{"an interval that is neither", "x", with(wa, func(c *Config) { c.PerRecipientInterval = "6" }), "(or off)"},
	} {
		if _, err := parseOne(tc.id, tc.ic); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func with(ic Config, change func(*Config)) Config {
	change(&ic)
	return ic
}

// TestIdentityDurationsTakeTheOneGrammar: the identities' durations read
// duration.Parse's grammar (days included), like every flag (issue 13 §4).
func TestIdentityDurationsTakeTheOneGrammar(t *testing.T) {
	t.Parallel()
	ic := Config{Provider: "http", Settings: map[string]any{"base_url": "http://x", "token_env": "T"}, ServiceWindow: "1d",
		PerRecipientInterval: "1d12h"}
	ic.Retry.Base, ic.Retry.Cap = "1d", "2d"
	id, err := parseOne("x", ic)
	if err != nil {
		t.Fatal(err)
	}
	if id.Window != 24*time.Hour || id.Pacing.PerRecipient != 36*time.Hour || id.Policy.Base != 24*time.Hour || id.Policy.Cap != 48*time.Hour {
		t.Errorf("window %s, per recipient %s, retry base %s cap %s", id.Window, id.Pacing.PerRecipient, id.Policy.Base, id.Policy.Cap)
	}
	ic.ServiceWindow = "1x"
	if _, err := parseOne("x", ic); err == nil {
		t.Error("service_window 1x was accepted")
	}
}
