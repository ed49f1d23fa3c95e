package store

import (
	"strings"
	"testing"
)

func TestValidKey(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]bool{
		"order-1001-shipped":    true,
		"a":                     true,
		"A.b_c:d-9":             true,
		strings.Repeat("k", 64): true,
		strings.Repeat("k", 65): false,
		"":                      false,
		"has space":             false,
		"slash/":                false,
		"ümlaut":                false,
		"percent%":              false,
	} {
		if got := ValidKey(k); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestValidE164(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"+15551234567":      true,
		"+972541234567":     true,
		"+123456789012345":  true,
		"+1234567890123456": false,
		"15551234567":       false,
		"+0551234567":       false,
		"+1555 123":         false,
		"+1234":             false,
	} {
		if got := ValidE164(s); got != want {
			t.Errorf("ValidE164(%q) = %v, want %v", s, got, want)
		}
	}
}

// Stored hashes outlive binaries: a replay next year must hash the same
// content to the same value. This pins the canonical encoding.
func TestBodyHashIsStable(t *testing.T) {
	t.Parallel()
	p := EnqueueParams{Key: "k", To: "+15551234567", Channel: ChannelWhatsApp, Identity: "sim",
		Payload: Payload{Template: "order_update", Lang: "en", Params: []string{"Ada", "1001"}}}
	const want = "635c6937fbe034ebd8a0db12be48982933dd0b0ee1f54d3e881bb59d0e3de179"
	if got := p.BodyHash(); got != want {
		t.Errorf("BodyHash() = %s, want %s (the canonical encoding changed: stored rows would stop replaying)", got, want)
	}
	q := p
	q.Key, q.Tenant, q.Purpose, q.Lane, q.TriggerRef = "other", "acme", "shipping", LaneReply, "order:1"
	if q.BodyHash() != want {
		t.Error("key, tenant, purpose, lane and ref are not content, but changed the hash")
	}
	q.Payload.Params = []string{}
	r := p
	r.Payload.Params = nil
	if q.BodyHash() != r.BodyHash() {
		t.Error("no parameters and an empty parameter list hash differently")
	}
	for name, change := range map[string]func(*EnqueueParams){
		"recipient": func(p *EnqueueParams) { p.To = "+15551234568" },
		"channel":   func(p *EnqueueParams) { p.Channel = ChannelSMS },
		"identity":  func(p *EnqueueParams) { p.Identity = "shop" },
		"template":  func(p *EnqueueParams) { p.Payload.Template = "other" },
		"language":  func(p *EnqueueParams) { p.Payload.Lang = "es" },
		"parameter": func(p *EnqueueParams) { p.Payload.Params = []string{"Ada", "1002"} },
		"order":     func(p *EnqueueParams) { p.Payload.Params = []string{"1001", "Ada"} },
	} {
		c := p
		change(&c)
		if c.BodyHash() == want {
			t.Errorf("another %s hashes the same", name)
		}
	}
}
