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

// Only the fields msgq reads are declared: previous_status and to are
// informative and never a reason to refuse an event.
type httpStatus struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Ref       string `json:"ref"`
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
// the sender's retries.
func HTTP(body []byte, webhookID string) (*Batch, error) {
	var b httpBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Type == "" {
		return nil, malformed("no type")
	}
	if b.Type != TypeStatus && b.Type != TypeReceived {
		return &Batch{Ignored: []string{fmt.Sprintf("type %.60q", b.Type)}}, nil
	}
	if len(b.Data) == 0 || b.Data[0] != '{' {
		return nil, malformed("%s: data is not an object", b.Type)
	}
	var batch *Batch
	var err error
	if b.Type == TypeStatus {
		batch, err = httpStatusEvent(&b, webhookID)
	} else {
		batch, err = httpReceivedEvent(&b)
	}
	if err == nil {
		err = batch.storable()
	}
	if err != nil {
		return nil, err
	}
	return batch, nil
}

func httpStatusEvent(b *httpBody, webhookID string) (*Batch, error) {
	var d httpStatus
	if err := json.Unmarshal(b.Data, &d); err != nil {
		return nil, malformed("%s data: %v", b.Type, err)
	}
	if d.ID == "" {
		return nil, malformed("%s: no data.id", b.Type)
	}
	if d.Status == "" {
		return nil, malformed("%s: no data.status", b.Type)
	}
	ts, t, err := httpTime(b.Timestamp, d.Timestamp)
	if err != nil {
		return nil, malformed("%s: %v", b.Type, err)
	}
	st, ok := statusState(d.Status)
	if !ok {
		return &Batch{Ignored: []string{fmt.Sprintf("%s: status %.40q of %.100s", b.Type, d.Status, d.ID)}}, nil
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
	if st == state.Failed && present(d.Error) {
		if d.Error[0] != '{' {
			return nil, malformed("%s: data.error is not an object", b.Type)
		}
		var e httpError
		if err := json.Unmarshal(d.Error, &e); err != nil {
			return nil, malformed("%s data.error: %v", b.Type, err)
		}
		ev.ErrorCode = code(e.Code)
		ev.Error = string(d.Error)
	}
	return &Batch{Statuses: []Status{{StatusEvidence: ev}}}, nil
}

func httpReceivedEvent(b *httpBody) (*Batch, error) {
	var d httpReceived
	if err := json.Unmarshal(b.Data, &d); err != nil {
		return nil, malformed("%s data: %v", b.Type, err)
	}
	if d.ID == "" {
		return nil, malformed("%s: no data.id", b.Type)
	}
	if !e164(d.From) {
		return nil, malformed("%s: data.from %.40q is not E.164", b.Type, d.From)
	}
	_, t, err := httpTime(b.Timestamp, d.Timestamp)
	if err != nil {
		return nil, malformed("%s: %v", b.Type, err)
	}
	typ := "text"
	if d.ButtonID != "" {
		typ = "button"
	}
	in := store.Inbound{
		Provider:          store.WebhookHTTP,
		ProviderMessageID: d.ID,
		From:              d.From,
		Type:              typ,
		Text:              d.Text,
		ReplyID:           d.ButtonID,
		ReplyTitle:        d.ButtonTitle,
		ContextID:         d.ReplyTo,
		ReceivedAt:        t,
	}
	return &Batch{Inbound: []Message{{Inbound: in}}}, nil
}

// httpTime picks the event's time: data's own timestamp when given (when
// the thing happened), else the envelope's (when the event was made). Both
// must be RFC 3339 when present. text is the one used, as received.
func httpTime(envelope, data string) (text string, t time.Time, err error) {
	for _, s := range []string{envelope, data} {
		if s == "" {
			continue
		}
		if t, err = time.Parse(time.RFC3339, s); err != nil {
			return "", time.Time{}, fmt.Errorf("timestamp %.40q is not RFC 3339", s)
		}
		// An offset can carry a four-digit year past 9999 (or before 1970)
		// in UTC; keep to what the WhatsApp side allows.
		if u := t.Unix(); u < 0 || u > maxUnix {
			return "", time.Time{}, fmt.Errorf("timestamp %.40q is out of range", s)
		}
		text = s
	}
	if text == "" {
		return "", time.Time{}, fmt.Errorf("no timestamp")
	}
	return text, t.UTC(), nil
}
