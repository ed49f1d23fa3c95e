package twilio

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/payload"
)

// Webhooks
//
// Twilio posts status callbacks and inbound messages as
// application/x-www-form-urlencoded forms
// (https://www.twilio.com/docs/usage/webhooks/messaging-webhooks):
//
//   - status callback: MessageSid, MessageStatus (and its legacy twin
//     SmsStatus), AccountSid, From, To, ErrorCode on a failure, ... to the
//     StatusCallback URL the send gave (ours carries msgq_id).
//   - inbound message: MessageSid, From, To, Body, NumMedia,
//     SmsStatus=received, ... to the number's or Messaging Service's
//     incoming-message URL.
//
// Neither carries a timestamp of the event (RawDlrDoneDate, on some
// delivered/undelivered callbacks, has minute precision and no zone), so
// the parsers take the time the webhook was received. Neither carries a
// delivery id; a status's DedupeKey is sid|status, since Twilio reports
// each status of a message once and a redelivery repeats the same pair.
//
// As in internal/webhook/payload, only a form that is no Twilio webhook at
// all is an error (wrapping payload.ErrMalformed); an unusable item is
// named in Batch.Invalid, an unused one in Batch.Ignored, and no text
// quotes a phone number.

// Parse reads one Twilio webhook body (the raw form) received at fullURL
// at receivedAt: an inbound message when its status is "received" or it
// has no MessageStatus, else a status callback.
func Parse(fullURL string, body []byte, receivedAt time.Time) (*payload.Batch, error) {
	if !utf8.Valid(body) {
		return nil, malformed("not UTF-8")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, malformed("not a form: %v", err)
	}
	st := form.Get("MessageStatus")
	if st == "" || st == "received" {
		return ParseInbound(form, receivedAt)
	}
	return ParseStatusCallback(fullURL, form, receivedAt)
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: twilio: %s", payload.ErrMalformed, fmt.Sprintf(format, args...))
}

// ParseStatusCallback reads a status callback posted to callbackURL (the
// URL as called: its msgq_id is the CallbackRef). MessageStatus is mapped
// by StatusState; a status with no state (receiving, received, unknown
// values) is Ignored. ErrorCode is kept verbatim, and Error is
// ErrorMessage when Twilio sent one, else "".
func ParseStatusCallback(callbackURL string, form url.Values, receivedAt time.Time) (*payload.Batch, error) {
	sid := form.Get("MessageSid")
	if sid == "" {
		sid = form.Get("SmsSid")
	}
	status := form.Get("MessageStatus")
	if status == "" {
		status = form.Get("SmsStatus")
	}
	if sid == "" && status == "" {
		return nil, malformed("neither MessageSid nor MessageStatus: not a status callback")
	}
	b := &payload.Batch{}
	const at = "status callback"
	switch {
	case sid == "":
		b.Invalid = append(b.Invalid, at+": no MessageSid")
		return b, nil
	case status == "":
		b.Invalid = append(b.Invalid, at+": no MessageStatus")
		return b, nil
	}
	st, ok := StatusState(status)
	if !ok {
		b.Ignored = append(b.Ignored, fmt.Sprintf("%s: status %.40q has no msgq state", at, status))
		return b, nil
	}
	ev := store.StatusEvidence{
		Provider:    ProviderName,
		DedupeKey:   sid + "|" + status,
		ProviderID:  sid,
		Status:      st,
		At:          receivedAt.UTC(),
		CallbackRef: CallbackID(callbackURL),
		ErrorCode:   form.Get("ErrorCode"),
		Error:       form.Get("ErrorMessage"),
	}
	if to := form.Get("To"); e164(to) {
		ev.Recipient = to
	}
	if why := unusable(ev.DedupeKey, ev.ProviderID, ev.CallbackRef, ev.ErrorCode, ev.Error); why != "" {
		b.Invalid = append(b.Invalid, at+": "+why)
		return b, nil
	}
	b.Statuses = append(b.Statuses, payload.Status{StatusEvidence: ev})
	if n, ok := identityNotice(ev, status); ok {
		b.Notices = append(b.Notices, payload.Note{Notice: n})
	}
	return b, nil
}

// identityNotice is the notice a failure callback also is when its code is
// the account's or the sender's (30002 account suspended, 30032 toll-free
// number not verified, ...: the identity rows of codes.go): every later
// send of the identity would fail the same way, so it pauses the identity
// (Kind.PausesOn), as a send answered with that code does. The message's
// own failure is the status beside it.
func identityNotice(ev store.StatusEvidence, status string) (store.Notice, bool) {
	if ev.Status != state.Failed || !pausesOn(ev.ErrorCode) {
		return store.Notice{}, false
	}
	detail, _ := json.Marshal(map[string]string{"MessageSid": ev.ProviderID, "MessageStatus": status,
		"ErrorCode": ev.ErrorCode, "ErrorMessage": ev.Error})
	return store.Notice{
		Provider: ProviderName, Kind: store.NoticeError, Field: "status_callback",
		Code: ev.ErrorCode, Subject: ev.ProviderID, Value: status, Detail: string(detail),
		DedupeKey: "error|" + ev.ProviderID + "|" + ev.ErrorCode, At: ev.At, ReceivedAt: ev.At,
	}, true
}

// pausesOn says an error code is the identity's in codes.go's table.
func pausesOn(code string) bool {
	class, _, known := CodeClass(code)
	return known && class == retry.Identity
}

// ParseInbound reads an inbound message. From must be E.164 (an SMS
// sender's number; other channels' addresses, "whatsapp:+1...", are not
// read here) or the message is Invalid. Type is "text", or "media" when
// NumMedia is not 0; Text is Body verbatim. OptOut and OptIn say whether
// the text is a STOP or a START (OptOutKeyword).
func ParseInbound(form url.Values, receivedAt time.Time) (*payload.Batch, error) {
	sid := form.Get("MessageSid")
	if sid == "" {
		sid = form.Get("SmsSid")
	}
	if sid == "" && form.Get("From") == "" && !form.Has("Body") {
		return nil, malformed("no MessageSid, From or Body: not an inbound message")
	}
	b := &payload.Batch{}
	const at = "inbound message"
	from := form.Get("From")
	switch {
	case sid == "":
		b.Invalid = append(b.Invalid, at+": no MessageSid")
		return b, nil
	case !e164(from):
		b.Invalid = append(b.Invalid, at+": From is not an E.164 number")
		return b, nil
	}
	typ := "text"
	if n := form.Get("NumMedia"); n != "" && n != "0" {
		typ = "media"
	}
	in := store.Inbound{
		Provider:          ProviderName,
		ProviderMessageID: sid,
		From:              from,
		Type:              typ,
		Text:              form.Get("Body"),
		ReceivedAt:        receivedAt.UTC(),
	}
	if why := unusable(in.ProviderMessageID, in.ProviderMessageID, "", "", in.Text); why != "" {
		b.Invalid = append(b.Invalid, at+": "+why)
		return b, nil
	}
	out, optIn := OptOutKeyword(in.Text)
	b.Inbound = append(b.Inbound, payload.Message{Inbound: in, OptOut: out, OptIn: optIn})
	return b, nil
}

// unusable is payload's rule for one item: ids and keys at most
// payload.MaxID bytes, no NUL anywhere (PostgreSQL text refuses it).
func unusable(key, id, ref string, texts ...string) string {
	switch {
	case len(id) > payload.MaxID:
		return fmt.Sprintf("id longer than %d bytes", payload.MaxID)
	case len(key) > payload.MaxID:
		return fmt.Sprintf("dedupe key longer than %d bytes", payload.MaxID)
	case len(ref) > payload.MaxID:
		return fmt.Sprintf("callback ref longer than %d bytes", payload.MaxID)
	}
	for _, s := range append([]string{key, id, ref}, texts...) {
		if strings.IndexByte(s, 0) >= 0 {
			return "a NUL character"
		}
	}
	return ""
}

// e164 is "+" and 1 to 15 digits, not starting with 0.
func e164(s string) bool {
	if len(s) < 2 || len(s) > 16 || s[0] != '+' || s[1] == '0' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Twilio's default keywords for long codes and toll-free numbers
// (https://help.twilio.com/articles/223134027, "Twilio support for opt-out
// keywords (SMS STOP filtering)"): Twilio itself blocks the sender after
// an opt-out keyword (further sends fail with 21610) and lifts the block
// after an opt-in keyword, then passes the message on to the webhook. A
// Messaging Service with Advanced Opt-Out may define others; those are
// not known here.
var (
	optOutKeywords = []string{"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"}
	optInKeywords  = []string{"START", "YES", "UNSTOP"}
)

// OptOutKeyword says whether an inbound body is one of Twilio's default
// opt-out keywords (optOut) or opt-in keywords (optIn). Twilio acts only
// on a message that is the keyword alone, in any case: "stop" is one,
// "STOP PLEASE" is not. Surrounding white space is ignored.
func OptOutKeyword(body string) (optOut, optIn bool) {
	w := strings.ToUpper(strings.TrimSpace(body))
	for _, k := range optOutKeywords {
		if w == k {
			return true, false
		}
	}
	for _, k := range optInKeywords {
		if w == k {
			return false, true
		}
	}
	return false, false
}
