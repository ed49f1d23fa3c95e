// Package provider is the edge where msgq meets a messaging API. Each
// provider sends one message with our key and reports what happened as a
// Result the retry table can classify; provider-specific code tables live
// with each provider (docs/providers.md) and map into retry classes here, never
// in the drain.
package provider

import (
	"context"
	"time"

	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/store"
)

// Message is one send as a provider sees it.
type Message struct {
	// ID is our row id; providers that echo a reference back in webhooks
	// (WhatsApp's biz_opaque_callback_data) carry it.
	ID string
	// Key is the idempotency key sent to providers that honour one.
	Key     string
	To      string // E.164
	Channel string
	Payload store.Payload
}

// Result is what one provider call produced. A provider never returns a Go
// error from Send: every failure is classified.
type Result struct {
	Class      retry.Class
	ProviderID string        // the provider's message id, when accepted
	HTTPStatus int           // 0 when no response arrived
	Code       string        // the provider's error code, verbatim
	Subcode    string        // the provider's error subcode, verbatim
	RawError   string        // the response body or transport error, verbatim
	RetryAfter time.Duration // the provider's stated delay, 0 if none
	// Replayed says the provider recognised our key from an earlier call
	// that got through.
	Replayed bool
	// RecipientOnly says a rate limit is for this recipient alone (a pair
	// limit such as WhatsApp's 131056): the drain slows that recipient,
	// not the whole identity.
	RecipientOnly bool
	// WindowClosed says the provider refused free-form text because the
	// customer-service window is closed (WhatsApp 131047, the http API's
	// window_closed): nothing was sent, and a row with a fallback
	// template switches to it.
	WindowClosed bool
	// OptedOut says the provider refused because the recipient opted out
	// of the sender (Twilio 21610, Kind.OptedOutOn): nothing was sent; the
	// drain fails the row as opted_out and records the opt-out.
	OptedOut bool
}

// Provider sends messages for one sending identity.
type Provider interface {
	// Send makes one call. It honours ctx's deadline; a call that ran out
	// of time after the request was written is ambiguous.
	Send(ctx context.Context, m *Message) Result
	// Idempotent says the provider deduplicates by Message.Key, so a call
	// whose outcome is unknown may be repeated with the same key.
	Idempotent() bool
}
