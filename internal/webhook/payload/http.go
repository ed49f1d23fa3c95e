package payload

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

// The http provider's event types.
const (
	TypeStatus   = "message.status"
	TypeReceived = "message.received"
)

type httpBody struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	// Raw: its shape depends on type, and unknown types are not read.
	Data json.RawMessage `json:"data"`
}

// Only the fields msgq reads are declared: previous_status is
// informative, and to (the recipient, compared with the row's when it is
// E.164) is never a reason to refuse an event.
type httpStatus struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Ref       string `json:"ref"`
	To        string `json:"to"`
	Timestamp string `json:"timestamp"`
	// Raw: kept verbatim as the row's last error.
	Error json.RawMessage `json:"error"`
}

type httpError struct {
	Code json.RawMessage `json:"code"`
}

type httpReceived struct {
	ID          string `json:"id"`
	From        string `json:"from"`
	Text        string `json:"text"`
	ReplyTo     string `json:"reply_to"`
	ButtonID    string `json:"button_id"`
	ButtonTitle string `json:"button_title"`
	Timestamp   string `json:"timestamp"`
}

// HTTP reads one http provider event (see the package comment for its
// shape). webhookID is the webhook-id header, "" when there was none; it
// is the DedupeKey of a status because it is what stays the same across
// the sender's retries. Only an unreadable envelope is an error; an event
// msgq cannot use is named in Batch.Invalid.
func HTTP(body []byte, webhookID string) (*Batch, error) {
	var b httpBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Type == "" {
		return nil, malformed("no type")
	}
	if b.Timestamp != "" {
		if _, err := rfc3339(b.Timestamp); err != nil {
			return nil, malformed("%v", err)
		}
	}
	if b.Type != TypeStatus && b.Type != TypeReceived {
		// An event type msgq does not read: kept as a notice, counted and
		// listed, never silently dropped.
		n := store.Notice{Provider: store.WebhookHTTP, Kind: store.NoticeUnknown, Field: text(b.Type), Detail: string(body),
			DedupeKey: noticeKey(b.Type, []byte(b.Timestamp), body)}
		if webhookID != "" {
			n.DedupeKey = "wh:" + text(webhookID)
		}
		if b.Timestamp != "" {
			n.At, _ = rfc3339(b.Timestamp)
		}
		return &Batch{Notices: []Note{{Notice: n}}}, nil
	}
	if len(b.Data) == 0 || b.Data[0] != '{' {
		return nil, malformed("%s: data is not an object", b.Type)
	}
	batch := &Batch{}
	if b.Type == TypeStatus {
		batch.httpStatus(&b, webhookID)
	} else {
		batch.httpReceived(&b)
	}
	return batch, nil
}

func (b *Batch) httpStatus(env *httpBody, webhookID string) {
	at := env.Type
	var d httpStatus
	if err := json.Unmarshal(env.Data, &d); err != nil {
		b.invalid(at, "%s", decodeProblem("data", err))
		return
	}
	if d.ID == "" {
		b.invalid(at, "no data.id")
		return
	}
	if len(d.ID) > MaxID {
		b.invalid(at, "data.id longer than %d bytes", MaxID)
		return
	}
	if d.Status == "" {
		b.invalid(at, "no data.status")
		return
	}
	ts, t, err := httpTime(env.Timestamp, d.Timestamp)
	if err != nil {
		b.invalid(at, "%v", err)
		return
	}
	st, ok := statusState(d.Status)
	if !ok {
		b.Ignored = append(b.Ignored, fmt.Sprintf("%s: status %.40q of %.100s", at, d.Status, d.ID))
		return
	}
	ev := store.StatusEvidence{
		Provider:    store.WebhookHTTP,
		DedupeKey:   d.ID + "|" + d.Status + "|" + ts,
		ProviderID:  d.ID,
		Status:      st,
		At:          t,
		CallbackRef: d.Ref,
	}
	if webhookID != "" {
		ev.DedupeKey = "wh:" + webhookID
	}
	if e164(d.To) {
		// Compared with the row's recipient; anything else is not.
		ev.Recipient = d.To
	}
	if st == state.Failed && present(d.Error) {
		if d.Error[0] != '{' {
			b.invalid(at, "data.error is not an object")
			return
		}
		var e httpError
		if err := json.Unmarshal(d.Error, &e); err != nil {
			b.invalid(at, "%s", decodeProblem("data.error", err))
			return
		}
		ev.ErrorCode = code(e.Code)
		ev.Error = string(d.Error)
	}
	kept := Status{StatusEvidence: ev}
	if why := kept.unusable(); why != "" {
		b.invalid(at, "%s", why)
		return
	}
	b.Statuses = append(b.Statuses, kept)
}

func (b *Batch) httpReceived(env *httpBody) {
	at := env.Type
	var d httpReceived
	if err := json.Unmarshal(env.Data, &d); err != nil {
		b.invalid(at, "%s", decodeProblem("data", err))
		return
	}
	if d.ID == "" {
		b.invalid(at, "no data.id")
		return
	}
	if !e164(d.From) {
		// Not quoted: it may be most of someone's number.
		b.invalid(at, "data.from is not E.164")
		return
	}
	_, t, err := httpTime(env.Timestamp, d.Timestamp)
	if err != nil {
		b.invalid(at, "%v", err)
		return
	}
	typ := "text"
	if d.ButtonID != "" {
		typ = "button"
	}
	kept := Message{Inbound: store.Inbound{
		Provider:          store.WebhookHTTP,
		ProviderMessageID: d.ID,
		From:              d.From,
		Type:              typ,
		Text:              d.Text,
		ReplyID:           d.ButtonID,
		ReplyTitle:        d.ButtonTitle,
		ContextID:         d.ReplyTo,
		ReceivedAt:        t,
	}}
	if why := kept.unusable(); why != "" {
		b.invalid(at, "%s", why)
		return
	}
	b.Inbound = append(b.Inbound, kept)
}

// httpTime picks the event's time: data's own timestamp when given (when
// the thing happened), else the envelope's (when the event was made). Both
// must be RFC 3339 when present. text is the one used, as received.
func httpTime(envelope, data string) (text string, t time.Time, err error) {
	for _, s := range []string{envelope, data} {
		if s == "" {
			continue
		}
		if t, err = rfc3339(s); err != nil {
			return "", time.Time{}, err
		}
		text = s
	}
	if text == "" {
		return "", time.Time{}, fmt.Errorf("no timestamp")
	}
	return text, t, nil
}

// rfc3339 reads one timestamp, in UTC.
func rfc3339(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %.40q is not RFC 3339", s)
	}
	// An offset can carry a four-digit year past 9999 (or before 1970)
	// in UTC; keep to what the WhatsApp side allows.
	if u := t.Unix(); u < 0 || u > maxUnix {
		return time.Time{}, fmt.Errorf("timestamp %.40q is out of range", s)
	}
	return t.UTC(), nil
}
