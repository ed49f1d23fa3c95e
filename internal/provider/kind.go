package provider

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/webhook/payload"
)

// Kind is everything msgq needs to know about one provider: what the
// config file calls it, what it sends on, how its config section reads,
// how it is built, its error codes, and (optionally) its webhooks. Each
// provider package exports one, and internal/provider/kinds lists them:
// adding a provider is one package and one line there (docs/providers.md,
// "Adding a provider").
type Kind struct {
	// Name is the config file's `provider:` value and the stored
	// deliveries' and notices' provider field.
	Name string
	// Channels are the channels it can send on, its default first. An
	// identity that names one in `channel:` sends on that one alone; one
	// that names none sends on all of them.
	Channels []string
	// Address is what its recipients are: AddressPhone (E.164) or
	// AddressEmail; internal/recipient validates and masks them.
	Address string
	// Idempotent says the provider deduplicates by Message.Key: a call
	// whose outcome is unknown may be repeated with the same key. It is a
	// property of the kind, known without any secret (reconcile decides
	// expired leases on it).
	Idempotent bool
	// Rate and PerRecipient are the pacing an identity gets unless its
	// config says otherwise ("" none), in the config's own grammar (80/s,
	// 6s): the provider's documented limits.
	Rate, PerRecipient string
	// Decode reads the identity's provider-specific keys strictly: every
	// key in raw is one this kind knows, or the error names it (one line,
	// no secret: secrets are never in the file, only the names of the
	// environment variables holding them).
	Decode func(raw map[string]any) (Settings, error)
	// Codes is its error-code table, for docs/providers.md and msgq
	// identities; the provider classifies with it, never the drain.
	Codes []Code
	// PausesOn says an error code a webhook notice reports is the
	// identity's (a token, a locked account): the processor pauses the
	// identity, as the drain would on the same code in a send's answer.
	// nil: no notice pauses.
	PausesOn func(code string) bool
	// OptedOutOn says an error code (in a send's answer or a status
	// webhook) means the recipient opted out of the sender (Twilio's
	// 21610): the row fails as opted_out and the opt-out is recorded, so
	// that msgq stops calling for that recipient. nil: no code says so.
	OptedOutOn func(code string) bool
	// Webhook is how it reports statuses and inbound messages; nil: it
	// sends none (msgq learns of its messages only from its answers and
	// its look-ups).
	Webhook *Webhook
}

// Recipient address types (Kind.Address).
const (
	AddressPhone = "phone"
	AddressEmail = "email"
)

// Settings is one identity's provider-specific configuration, as its
// kind's Decode read it.
type Settings interface {
	// SendEnv names the environment variables the identity needs to send.
	SendEnv() []Env
	// WebhookEnv names those its webhook verification needs (none: its
	// webhooks are not received, or the kind sends none).
	WebhookEnv() []Env
	// New builds the provider. Secrets are read through getenv here and
	// nowhere else, and go nowhere but the provider's requests; with a
	// getenv that knows nothing, it builds a provider good for its kind's
	// properties (is it a Lookuper?) and for nothing else.
	New(getenv func(string) string) (Provider, error)
	// Sender is what the provider's webhooks name the identity by (key
	// and value: "phone_number_id", "106540352242922"), "" when they name
	// none: two identities with the same one are refused, since which of
	// them an item is filed under would be a matter of chance.
	Sender() (key, value string)
	// Account groups identities on one provider account (templates are
	// the account's): identities with the same non-empty Account share
	// template holds.
	Account() string
	// ServiceWindow is the customer-service window enforced when the
	// config sets none (0: none).
	ServiceWindow() time.Duration
}

// ProgressReporter is Settings that know whether the identity's accepted
// sends report their progress (delivered, read) at all: a twilio identity
// receives inbound SMS with its auth token, but statuses only when it asks
// for them (status_callback). Settings that do not implement it report
// progress whenever the identity's webhooks are received.
type ProgressReporter interface {
	ReportsProgress() bool
}

// Env is one environment variable an identity reads.
type Env struct {
	Key  string // the config key that names it (token_env)
	Name string // the variable (SHOP_TOKEN)
}

// String is how messages name it: "SHOP_TOKEN (token_env)".
func (e Env) String() string { return e.Name + " (" + e.Key + ")" }

// Code is one row of a kind's error-code table.
type Code struct {
	Code    string
	Class   retry.Class
	Meaning string
}

// Lookuper is a provider that can report a message's status by the
// provider's id (the http API's GET /v1/messages/{id}): reconcile asks it
// about unknown rows.
type Lookuper interface {
	Lookup(ctx context.Context, providerID string) (status string, res Result)
}

// Finder is a provider that can find a message it was sent without the
// provider's id (Twilio's list of messages to a recipient, matched on
// msgq's id or the text): reconcile asks it about unknown rows whose
// send's answer, and so the id, was lost. m is the row as the drain sent
// it, around the time of its call. found is every message that could be
// m, in the provider's order: the provider cannot know which of them
// other rows already own (a second send of the same text to the same
// number, or an operator's resend), so reconcile leaves those out through
// the store and settles a row only when exactly one is left
// (docs/operations.md, reconcile). res is Accepted when the provider's
// listing was read whole, else the failed call's classification (found
// is then nil).
type Finder interface {
	Find(ctx context.Context, m *Message, around time.Time) (found []Candidate, res Result)
}

// Candidate is one message a Finder found that could be the row it was
// asked about.
type Candidate struct {
	ID     string // the provider's id
	Status string // the provider's status, in its own words (StatusMapper)
	Code   string // the provider's error code for it, verbatim ("" for none)
}

// StatusMapper is a Lookuper or Finder whose statuses are its own
// vocabulary (Twilio's queued, sending, canceled, ...): it says which row
// state each means, ok false for none. A provider without one is read
// with the http API's words (accepted, sent, delivered, read, failed).
type StatusMapper interface {
	StatusState(status string) (st state.State, ok bool)
}

// Webhook is a kind's webhook side: how a delivery is verified and read.
type Webhook struct {
	// Name is the webhook format's name: the receiver mounts
	// /webhooks/<Name> for every identity whose kind speaks it (each
	// identity's secrets are tried in turn), and stored deliveries carry
	// it as their provider. Kinds that speak one format share it (the
	// simulator speaks the http API's). Each identity also gets
	// /webhooks/<kind>/<identity>, verified with its secrets alone.
	Name string
	// SecretKey is the config key naming its secret, for the 404 of a
	// format no identity here has configured.
	SecretKey string
	// TellWhy says a 401 tells the sender why (a stale timestamp is its
	// clock, worth knowing); otherwise it says no more than "signature
	// refused".
	TellWhy bool
	// Headers are the request headers kept with the stored delivery:
	// Parse reads them back (lower-case names).
	Headers []string
	// Verifier builds an identity's verifier from its settings, reading
	// its secrets through getenv now. An error is a configuration fault
	// (a malformed secret), reported at start-up.
	Verifier func(s Settings, getenv func(string) string) (Verifier, error)
	// Parse reads a body into evidence. It is pure and runs twice: in the
	// receiver, to refuse (400) what is not this provider's webhook, and
	// on the stored delivery in the processor. headers are the kept ones.
	Parse func(body []byte, headers map[string]string) (*payload.Batch, error)
	// KeepsCall says Parse needs the public URL the provider called and
	// the time the delivery was received (Twilio: our reference travels
	// only in the callback URL, and its webhooks carry no time of their
	// own). The receiver keeps both with the stored delivery, as the
	// pseudo-headers HeaderURL and HeaderReceivedAt, so that the processor
	// (and a replay) re-parses it exactly as the receiver did.
	KeepsCall bool
	// Body says what a delivery's body is, for msgq webhook replay's help
	// ("form-encoded, a status callback or an inbound SMS"); "" says nothing more.
	Body string
	// NamesSender says items name the identity they came through
	// (Settings.Sender): an item naming a sender no configured identity
	// has is set aside rather than filed under the identity whose secret
	// verified the delivery.
	NamesSender bool
	// Dedupe, when set, names a verified delivery across its copies from
	// what the provider signed (body and the kept headers): its own
	// delivery id where it signs one. nil: the digest of the body
	// (DigestKey("body", body)). Never from anything unsigned: a replayer
	// could change that at will and have every copy stored. See
	// DedupeKey.
	Dedupe func(body []byte, headers map[string]string) string
}

// DedupeKey is the key webhook serve stores a verified delivery under:
// a copy whose key its identity has stored already (the provider's retry,
// or a signed delivery captured and replayed) is answered 200 and not
// stored again (docs/webhooks.md).
func (w *Webhook) DedupeKey(body []byte, headers map[string]string) string {
	if w.Dedupe != nil {
		return w.Dedupe(body, headers)
	}
	return DigestKey("body", body)
}

// DigestKey is what names a dedupe key ("body", "webhook-id"), a colon,
// and the hex SHA-256 of parts, each preceded by its length so that no
// two lists of parts digest alike: a key of fixed size, whatever the
// provider sent, so that it always fits the store's unique index.
func DigestKey(what string, parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return what + ":" + hex.EncodeToString(h.Sum(nil))
}

// Pseudo-headers the receiver keeps with a delivery of a kind whose
// Webhook.KeepsCall: never a request's own headers (those kept are only
// Webhook.Headers, and these overwrite any of the same name).
const (
	// HeaderURL is the public URL the provider called (Delivery.URL).
	HeaderURL = "x-msgq-url"
	// HeaderReceivedAt is when the receiver received it, RFC 3339 UTC.
	HeaderReceivedAt = "x-msgq-received-at"
)

// Delivery is a webhook request as a Verifier sees it.
type Delivery struct {
	Header http.Header
	Query  url.Values
	// Body is the raw body; nil in Precheck.
	Body []byte
	// URL is the public URL the provider called (signature schemes such
	// as Twilio's sign it): the receiver's public base and the request's
	// path and query.
	URL string
	// Now is the clock the timestamps are judged on; Tolerance how far
	// they may be from it.
	Now       time.Time
	Tolerance time.Duration
}

// Verifier checks that deliveries come from the provider, with one
// identity's secrets.
type Verifier interface {
	// Precheck refuses a delivery before its body is read: a missing or
	// malformed signature header, a stale timestamp. nil proves nothing.
	Precheck(d *Delivery) error
	// Verify checks the signature over the body. Errors wrapping
	// verify.ErrBadSignature mean "not this identity's secret", and the
	// next identity's may be tried; any other error fails for every
	// identity alike.
	Verify(d *Delivery) error
}

// Handshaker is a Verifier that answers a subscription handshake (Meta's
// GET hub.challenge): ok false refuses it (403).
type Handshaker interface {
	Handshake(q url.Values) (challenge string, ok bool)
}

// SendsOn says the kind can send on channel.
func (k *Kind) SendsOn(channel string) bool { return slices.Contains(k.Channels, channel) }

// Strict is the usual first step of a Decode: it refuses any key of raw
// not in known, naming it and the known ones, and explains a key that
// belongs to another kind with hint (nil: none).
func Strict(kind string, raw map[string]any, known []string, hint func(key string) string) error {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		if hint != nil {
			if h := hint(k); h != "" {
				return &UnknownSettingError{Key: k, Msg: h}
			}
		}
		return &UnknownSettingError{Key: k, Msg: fmt.Sprintf("unknown setting %q for provider %s (known: %s)", k, kind, strings.Join(known, ", "))}
	}
	return nil
}

// UnknownSettingError is a key a kind does not read: a misspelling, or
// another kind's setting.
type UnknownSettingError struct {
	Key, Msg string
}

func (e *UnknownSettingError) Error() string { return e.Msg }

// String reads a string setting; a value of another type is an error
// naming the key. A number (phone_number_id: 1000001 unquoted) is read as
// its text, as the YAML means it.
func String(raw map[string]any, key string) (string, error) {
	v, ok := raw[key]
	if !ok || v == nil {
		return "", nil
	}
	switch s := v.(type) {
	case string:
		return s, nil
	case int, int64, uint64, float64:
		return fmt.Sprint(s), nil
	}
	return "", fmt.Errorf("%s must be a string (got %T)", key, v)
}

// StringSetting pairs a key with where its value goes (Strings).
type StringSetting struct {
	Key string
	Dst *string
}

// Strings reads several string settings (String each), stopping at the
// first error.
func Strings(raw map[string]any, settings ...StringSetting) error {
	for _, f := range settings {
		v, err := String(raw, f.Key)
		if err != nil {
			return err
		}
		*f.Dst = v
	}
	return nil
}

// MissingEnv names the variables of es that are unset in getenv's
// environment.
func MissingEnv(es []Env, getenv func(string) string) []string {
	var out []string
	for _, e := range es {
		if e.Name != "" && getenv(e.Name) == "" {
			out = append(out, e.String())
		}
	}
	return out
}

// MailTemplater is implemented by the Settings of a kind that sends email
// rendered from template files (internal/mailtemplate): msgq send renders
// an email's --template through the directory it names ("" none) before
// anything is written, so a missing template or parameter is bad input.
type MailTemplater interface {
	MailTemplates() string
}
