// Package payload reads webhook bodies into the statuses and inbound
// messages msgq keeps as evidence. It is pure: no I/O, no clock, no store.
// The server verifies the signature (package verify), stores the raw body,
// and only then hands it here, so a parser bug can be fixed and the stored
// events replayed.
//
// A body is read in two layers. Its envelope is what says which provider's
// webhook it is and where its items are; only an envelope that cannot be
// read is an error, and every error wraps ErrMalformed: the body is not a
// webhook of that provider, and the server answers it 400 and stores
// nothing. That is: not JSON, not UTF-8 or not an object; for WhatsApp, an
// object that is not "whatsapp_business_account", or entry, its changes or
// a "messages" change's value of another JSON type than documented; for
// http, no type, a data that is missing or not an object (for the event
// types msgq reads), or an envelope timestamp that is not RFC 3339.
//
// Items (a status, an inbound message) are judged one by one, because a
// provider batches them and retries a refused body whole: Meta for 7 days,
// then drops it, good statuses and all. An item msgq cannot use is skipped
// and described in Batch.Invalid, and the others are returned: one without
// an id, a status or a usable timestamp, an http sender that is not E.164,
// a field msgq reads of another JSON type than documented, an id, key or
// reference longer than MaxID bytes (PostgreSQL's btree index refuses
// index rows of a few kilobytes), or a NUL character in a field kept as
// text (JSON allows "\u0000", PostgreSQL text does not). An item recognised
// but of no use to msgq (a status value with no state, a change about the
// account, an event type we do not handle) is named in Batch.Ignored.
// Neither is an error: refusing would make the provider redeliver it for
// days, to no purpose, and the raw body is stored either way, so a parser
// fix can replay it.
//
// Fields msgq does not read (pricing, conversation, contacts, ...) are not
// looked at. The descriptive text of media, locations, reactions and the
// like is best effort and never makes an item invalid. Texts have no length
// limit beyond the body's. No error, Invalid or Ignored text quotes a
// sender's number: they end up in logs and 400 bodies.
//
// # WhatsApp
//
// The Cloud API "messages" webhook as Meta documents it:
// object "whatsapp_business_account", entry[].changes[] with field
// "messages" and a value holding metadata.phone_number_id, statuses[] and
// messages[]. Statuses sent, delivered, read, played (a voice message
// played has been read) and failed are kept; others are ignored. A status's
// DedupeKey is wamid|status|timestamp as received, because Meta sends no
// delivery id and redelivers the same bytes. A status's recipient_id
// (bare digits) is kept as Recipient with a plus, and checked against
// the row's. A reaction's reaction.message_id is its ContextID: a
// reaction is about that message, as a reply is. An inbound message without
// "from" is kept with From "": Meta is rolling out usernames, and a user
// who hides their number behind one may come without it.
//
// # The http provider's webhook
//
// The generic HTTP messaging API (provider "http", package httpapi) posts
// one event per request, signed with Standard Webhooks 1.0: headers
// webhook-id (stable across retries), webhook-timestamp and
// webhook-signature. The body follows the Standard Webhooks payload
// convention, {"type", "timestamp", "data"}:
//
//	{"type": "message.status",
//	 "timestamp": "2026-11-29T10:00:00Z",
//	 "data": {"id": "msg_123",                      the provider's message id (the send's "id")
//	          "status": "delivered",                sent, delivered, read or failed
//	          "previous_status": "sent",            optional, informative
//	          "ref": "01M8K8GPM0H2BH8VGS9ZM5H3BV",  our message id, as sent in "ref"
//	          "to": "+15551234567",                 optional: the recipient (E.164), checked against the row's
//	          "timestamp": "...",                   optional: when it happened, else the envelope's
//	          "error": {"code": "window_closed",    failed only
//	                    "message": "..."}}}
//
//	{"type": "message.received",
//	 "timestamp": "2026-11-29T10:00:05Z",
//	 "data": {"id": "in_456",                       the provider's id of the inbound message
//	          "from": "+15551234567",               E.164, with the plus
//	          "to": "+15550000000",
//	          "text": "hi",
//	          "reply_to": "msg_123",                optional: the provider id of the message replied to
//	          "button_id": "yes",                   optional: the button chosen; replies match on it
//	          "button_title": "Yes",
//	          "timestamp": "..."}}                  optional, as for statuses
//
// Timestamps are RFC 3339. An inbound message's type is "button" when it
// carries button_id, else "text". Other status values (accepted, queued, ...) and
// other event types are ignored, not refused. A status's DedupeKey is
// "wh:" + webhook-id when the header is present, else id|status|timestamp;
// a failed status keeps error.code as ErrorCode and the "error" object,
// byte for byte, as Error.
package payload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// Status is one status from a body, with the WhatsApp phone_number_id it
// came through ("" for http).
type Status struct {
	store.StatusEvidence
	PhoneNumberID string
}

// Message is one inbound message.
type Message struct {
	store.Inbound
	PhoneNumberID string
	// OptOut and OptIn say the message is a keyword the provider itself
	// acts on (Twilio's STOP and START families): the processor records
	// the sender as opted out of, or back in to, the identity.
	OptOut, OptIn bool
}

// Note is one notice from a body, with the WhatsApp phone_number_id it
// came through ("" when it names none: template and account updates are
// about the business account).
type Note struct {
	store.Notice
	PhoneNumberID string
}

// Batch is what one webhook body says.
type Batch struct {
	Statuses []Status
	Inbound  []Message
	// Notices are what it says about the account, a number or a
	// template rather than a message, and whatever msgq does not
	// understand (kind unknown): kept, never dropped.
	Notices []Note
	// Ignored names items recognised but not used (e.g. a status value
	// msgq has no state for, a change about the account), for logs.
	Ignored []string
	// Invalid names items skipped because msgq cannot use them (no id, a
	// bad timestamp, an id over MaxID bytes, ...), with why, for logs:
	// "entry[0].changes[0].value.statuses[1]: no id".
	Invalid []string
}

// MaxID is the longest, in bytes, an id, key or reference kept from a
// webhook may be: provider ids, message ids, DedupeKey, callback refs,
// reply and context ids. They are indexed, and PostgreSQL's btree index
// refuses rows over about 2.7 kB; one 9 kB wamid would fail the whole
// ingest of its delivery, on every attempt.
const MaxID = 512

func (b *Batch) invalid(at, format string, args ...any) {
	b.Invalid = append(b.Invalid, at+": "+fmt.Sprintf(format, args...))
}

// ErrMalformed is matched (errors.Is) by every parse error: the body's
// envelope is not a webhook of this provider. The HTTP server answers it
// 400 and stores nothing.
var ErrMalformed = errors.New("malformed webhook body")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// statusState maps a status value both providers share to a row state; ok
// is false for values msgq has no state for.
func statusState(s string) (st state.State, ok bool) {
	switch s {
	case "sent":
		return state.Sent, true
	case "delivered":
		return state.Delivered, true
	case "read":
		return state.Read, true
	case "failed":
		return state.Failed, true
	}
	return state.None, false
}

// maxUnix is 9999-12-31T23:59:59Z: later instants cannot be written as
// JSON or RFC 3339, and the store writes both.
const maxUnix = 253402300799

// unixSeconds reads a Unix timestamp given as a JSON string of digits (what
// Meta documents) or as a bare integer (tolerated, same meaning). text is
// the digits, for the DedupeKey, so both spellings deduplicate together.
func unixSeconds(raw json.RawMessage) (text string, t time.Time, err error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", time.Time{}, errors.New("no timestamp")
	}
	text = string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", time.Time{}, err
		}
	}
	if !digits(text) {
		return "", time.Time{}, fmt.Errorf("timestamp %.40q is not Unix seconds", text)
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n > maxUnix {
		return "", time.Time{}, fmt.Errorf("timestamp %.40q is out of range", text)
	}
	return text, time.Unix(n, 0).UTC(), nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// e164 reports whether s is "+" and 1 to 15 digits, not starting with 0
// (no country code does). Possible-for-its-country is not checked here:
// the number is the customer's, whatever it looks like to us.
func e164(s string) bool {
	return len(s) >= 2 && len(s) <= 16 && s[0] == '+' && s[1] != '0' && digits(s[1:])
}

// code renders an error code given as a JSON number (Meta) or string (the
// http API); anything else has no code.
func code(raw json.RawMessage) string {
	switch {
	case len(raw) == 0:
		return ""
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		return string(raw) // the literal as sent: 131026 stays "131026"
	}
	return ""
}

// present says a raw field was given a value other than null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// decodeObject unmarshals a body that must be one JSON object. Invalid
// UTF-8 is refused rather than silently replaced (as encoding/json would):
// error texts are kept verbatim and must be storable as text.
func decodeObject(body []byte, v any) error {
	if !utf8.Valid(body) {
		return malformed("not UTF-8")
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return malformed("not a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return malformed("%v", err)
	}
	return nil
}

// unusable says why a status cannot be stored as it is, "" when it can.
func (s *Status) unusable() string {
	switch {
	case len(s.ProviderID) > MaxID:
		return fmt.Sprintf("id longer than %d bytes", MaxID)
	case len(s.DedupeKey) > MaxID:
		return fmt.Sprintf("dedupe key longer than %d bytes", MaxID)
	case len(s.CallbackRef) > MaxID:
		return fmt.Sprintf("callback ref longer than %d bytes", MaxID)
	case hasNUL(s.DedupeKey, s.ProviderID, s.CallbackRef, s.ErrorCode, s.Error, s.PhoneNumberID):
		return "a NUL character"
	}
	return ""
}

// unusable says why an inbound message cannot be stored as it is, "" when
// it can.
func (m *Message) unusable() string {
	switch {
	case len(m.ProviderMessageID) > MaxID:
		return fmt.Sprintf("id longer than %d bytes", MaxID)
	case len(m.ReplyID) > MaxID:
		return fmt.Sprintf("reply id longer than %d bytes", MaxID)
	case len(m.ContextID) > MaxID:
		return fmt.Sprintf("context id longer than %d bytes", MaxID)
	case hasNUL(m.ProviderMessageID, m.From, m.Type, m.Text, m.ReplyID, m.ReplyTitle, m.ContextID, m.PhoneNumberID):
		return "a NUL character"
	}
	return ""
}

// decodeProblem says why an item did not decode, naming the field and the
// JSON type found but never a value (it could be a sender's number).
func decodeProblem(prefix string, err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return "unreadable"
	}
	field := te.Field
	if prefix != "" && field != "" {
		field = prefix + "." + field
	} else if field == "" {
		field = prefix
	}
	kind, _, _ := strings.Cut(te.Value, " ") // "number 1e999" names the value
	if field == "" {
		return "a JSON " + kind + " where an object was expected"
	}
	return fmt.Sprintf("%s is a JSON %s", field, kind)
}

// noticeKey is a notice's DedupeKey: Meta sends no delivery id and
// redelivers the same bytes, so the field, the entry's time and the
// value's bytes identify it.
func noticeKey(field string, t json.RawMessage, raw []byte) string {
	h := sha256.New()
	h.Write([]byte(field))
	h.Write([]byte{0})
	h.Write(t)
	h.Write([]byte{0})
	h.Write(raw)
	return field + ":" + hex.EncodeToString(h.Sum(nil))[:40]
}

// text keeps s usable as stored text: no NUL, at most MaxID bytes.
func text(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) > MaxID {
		s = s[:MaxID]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

func hasNUL(ss ...string) bool {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 {
			return true
		}
	}
	return false
}
