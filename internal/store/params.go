package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/recipient"
)

// ValidKey reports whether k is a usable idempotency key: 1 to 64 of
// A-Za-z0-9._:- (the set idempotent HTTP APIs accept, so the key can be
// passed to the provider as is).
func ValidKey(k string) bool {
	if len(k) < 1 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidE164 reports whether s looks like an E.164 number: "+" and 8 to 15
// digits. Full validation (country rules) is the caller's job on input,
// through internal/recipient.
func ValidE164(s string) bool { return recipient.Valid(recipient.WhatsApp, s) == nil }

// Normalize fills defaults (tenant, lane) in place.
func (p *EnqueueParams) Normalize() {
	if p.Tenant == "" {
		p.Tenant = DefaultTenant
	}
	if p.Lane == "" {
		p.Lane = LaneBulk
	}
}

// Resolve turns p's delays (NotBeforeIn, ExpiresIn) into times on the
// store's clock, now. Stores call it before Validate.
func (p *EnqueueParams) Resolve(now time.Time) {
	if p.NotBeforeIn != 0 {
		p.NotBefore, p.NotBeforeIn = now.Add(p.NotBeforeIn), 0
	}
	if p.ExpiresIn != 0 {
		p.ExpiresAt, p.ExpiresIn = now.Add(p.ExpiresIn), 0
	}
}

// Validate checks p as a store would accept it, relative to now (a
// deadline given as a delay, ExpiresIn, needs no clock to check). Errors
// are *InvalidError naming the field.
func (p *EnqueueParams) Validate(now time.Time) error {
	switch {
	case !ValidKey(p.Tenant):
		return &InvalidError{"tenant", "must be 1 to 64 characters of A-Za-z0-9._:-"}
	case p.Key == "":
		return &InvalidError{"key", "is required"}
	case !ValidKey(p.Key):
		return &InvalidError{"key", "must be 1 to 64 characters of A-Za-z0-9._:- (got " + quoteShort(p.Key) + ")"}
	case !recipient.Known(p.Channel):
		// The channels internal/recipient knows the addresses of.
		return &InvalidError{"channel", "must be whatsapp, sms or email (got " + quoteShort(p.Channel) + ")"}
	case recipient.Valid(p.Channel, p.To) != nil:
		if recipient.IsPhone(p.Channel) {
			return &InvalidError{"to", "must be an E.164 number like +15551234567 (got " + quoteShort(p.To) + ")"}
		}
		// Stored addresses are in recipient.Normalize's form, so that one
		// address is one key of windows, suppressions and evidence.
		return &InvalidError{"to", "must be a bare email address like ada@example.com, its domain in lower case (got " + quoteShort(p.To) + ")"}
	case p.Identity == "":
		return &InvalidError{"identity", "is required"}
	case p.Lane != LaneReply && p.Lane != LaneBulk:
		return &InvalidError{"lane", "must be reply or bulk (got " + quoteShort(p.Lane) + ")"}
	}
	pl := p.Payload
	switch {
	case pl.Text != "" && pl.Template != "":
		return &InvalidError{"text", "cannot be combined with a template: send one or the other"}
	case pl.Text == "" && pl.Template == "":
		return &InvalidError{"payload", "needs a template or text"}
	case pl.Template == "" && strings.TrimSpace(pl.Text) == "":
		return &InvalidError{"text", "is blank"}
	case pl.Text != "" && (pl.Lang != "" || len(pl.Params) > 0):
		return &InvalidError{"text", "takes no language or parameters (those belong to a template)"}
	case pl.FallbackTemplate != "" && pl.Text == "":
		return &InvalidError{"fallback_template", "only applies to free-form text"}
	case len(pl.FallbackParams) > 0 && pl.FallbackTemplate == "":
		return &InvalidError{"fallback_params", "need a fallback_template"}
	}
	switch {
	case p.ExpiresIn < 0:
		return &InvalidError{"expires_in", "puts the deadline in the past (" + p.ExpiresIn.String() + ")"}
	case p.ExpiresIn > 0 && p.NotBeforeIn != 0 && p.ExpiresIn <= p.NotBeforeIn:
		return &InvalidError{"expires_at", "is not after not_before: the message could never go out"}
	}
	if !p.ExpiresAt.IsZero() && p.ExpiresIn == 0 {
		if !p.ExpiresAt.After(now) {
			return &InvalidError{"expires_at", "is in the past (" + p.ExpiresAt.UTC().Format(time.RFC3339) + ")"}
		}
		if !p.NotBefore.IsZero() && p.NotBeforeIn == 0 && !p.ExpiresAt.After(p.NotBefore) {
			return &InvalidError{"expires_at", "is not after not_before: the message could never go out"}
		}
	}
	return nil
}

func quoteShort(s string) string {
	if len(s) > 70 {
		s = s[:70] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// BodyHash is the hash of a send's canonical content: recipient, channel,
// identity and payload. Same key and same hash is a replay; same key and
// another hash is a conflict. Purpose, lane, ref and timing are not content:
// changing them on a replay does not make it a different message.
func (p *EnqueueParams) BodyHash() string {
	// A struct marshals its fields in declaration order, so this encoding
	// is canonical; never reorder these fields (stored hashes depend on it).
	b, _ := json.Marshal(struct {
		To       string  `json:"to"`
		Channel  string  `json:"channel"`
		Identity string  `json:"identity"`
		Payload  Payload `json:"payload"`
	}{p.To, p.Channel, p.Identity, canonicalPayload(p.Payload)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func canonicalPayload(p Payload) Payload {
	p.QuietHours = ""
	if len(p.Params) == 0 {
		p.Params = nil
	}
	if len(p.FallbackParams) == 0 {
		p.FallbackParams = nil
	}
	return p
}
