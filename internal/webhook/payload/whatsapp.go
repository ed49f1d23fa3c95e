package payload

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type waBody struct {
	Object string `json:"object"`
	// Raw, so that a missing or null entry can be told from an empty one.
	Entry json.RawMessage `json:"entry"`
}

type waEntry struct {
	Changes []waChange `json:"changes"`
}

type waChange struct {
	Field string `json:"field"`
	// Raw: only "messages" values are read; other fields have other shapes.
	Value json.RawMessage `json:"value"`
}

type waValue struct {
	Metadata struct {
		PhoneNumberID string `json:"phone_number_id"`
	} `json:"metadata"`
	Statuses []waStatus  `json:"statuses"`
	Messages []waMessage `json:"messages"`
	// A system- or account-level problem (Meta's "errors" webhook), about
	// no message in particular.
	Errors json.RawMessage `json:"errors"`
}

type waStatus struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"`
	Timestamp json.RawMessage `json:"timestamp"`
	Callback  string          `json:"biz_opaque_callback_data"`
	// Raw: kept verbatim as the row's last error.
	Errors json.RawMessage `json:"errors"`
}

type waError struct {
	Code json.RawMessage `json:"code"`
}

type waReply struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

type waMessage struct {
	ID        string          `json:"id"`
	From      string          `json:"from"`
	Timestamp json.RawMessage `json:"timestamp"`
	Type      string          `json:"type"`
	Context   *struct {
		ID string `json:"id"`
	} `json:"context"`
	Text *struct {
		Body string `json:"body"`
	} `json:"text"`
	Interactive *struct {
		ButtonReply *waReply `json:"button_reply"`
		ListReply   *waReply `json:"list_reply"`
	} `json:"interactive"`
	Button *struct {
		Payload string `json:"payload"`
		Text    string `json:"text"`
	} `json:"button"`

	// Raw: read best effort by describe, never a reason to refuse a body.
	Image    json.RawMessage `json:"image"`
	Video    json.RawMessage `json:"video"`
	Document json.RawMessage `json:"document"`
	Sticker  json.RawMessage `json:"sticker"`
	Audio    json.RawMessage `json:"audio"`
	Reaction json.RawMessage `json:"reaction"`
	Location json.RawMessage `json:"location"`
	Contacts json.RawMessage `json:"contacts"`
	Order    json.RawMessage `json:"order"`
	System   json.RawMessage `json:"system"`
}

// WhatsApp reads a Cloud API webhook body: every status and inbound
// message of every change of every entry, in order.
func WhatsApp(body []byte) (*Batch, error) {
	var b waBody
	if err := decodeObject(body, &b); err != nil {
		return nil, err
	}
	if b.Object != "whatsapp_business_account" {
		return nil, malformed("object %.60q is not whatsapp_business_account", b.Object)
	}
	if len(b.Entry) == 0 || b.Entry[0] != '[' {
		return nil, malformed("entry is not an array")
	}
	var entries []waEntry
	if err := json.Unmarshal(b.Entry, &entries); err != nil {
		return nil, malformed("entry: %v", err)
	}
	batch := &Batch{}
	for i, e := range entries {
		for j, c := range e.Changes {
			at := fmt.Sprintf("entry[%d].changes[%d]", i, j)
			if c.Field != "messages" {
				batch.Ignored = append(batch.Ignored, fmt.Sprintf("%s: field %.60q", at, c.Field))
				continue
			}
			if err := batch.waChange(at, c.Value); err != nil {
				return nil, err
			}
		}
	}
	if err := batch.storable(); err != nil {
		return nil, err
	}
	return batch, nil
}

func (b *Batch) waChange(at string, raw json.RawMessage) error {
	if len(raw) == 0 || raw[0] != '{' {
		return malformed("%s.value is not an object", at)
	}
	var v waValue
	if err := json.Unmarshal(raw, &v); err != nil {
		return malformed("%s.value: %v", at, err)
	}
	pnid := v.Metadata.PhoneNumberID
	for k := range v.Statuses {
		if err := b.waStatus(fmt.Sprintf("%s.value.statuses[%d]", at, k), &v.Statuses[k], pnid); err != nil {
			return err
		}
	}
	for k := range v.Messages {
		if err := b.waMessage(fmt.Sprintf("%s.value.messages[%d]", at, k), &v.Messages[k], pnid); err != nil {
			return err
		}
	}
	if present(v.Errors) {
		b.Ignored = append(b.Ignored, fmt.Sprintf("%s: errors %s", at, errorCodes(v.Errors)))
	}
	return nil
}

func (b *Batch) waStatus(at string, s *waStatus, pnid string) error {
	if s.ID == "" {
		return malformed("%s: no id", at)
	}
	if s.Status == "" {
		return malformed("%s: no status", at)
	}
	ts, t, err := unixSeconds(s.Timestamp)
	if err != nil {
		return malformed("%s: %v", at, err)
	}
	st, ok := statusState(s.Status)
	if s.Status == "played" {
		// A voice message played has been read; "read" may never come.
		st, ok = state.Read, true
	}
	if !ok {
		b.Ignored = append(b.Ignored, fmt.Sprintf("%s: status %.40q of %.100s", at, s.Status, s.ID))
		return nil
	}
	ev := store.StatusEvidence{
		Provider:    store.WebhookWhatsApp,
		DedupeKey:   s.ID + "|" + s.Status + "|" + ts,
		ProviderID:  s.ID,
		Status:      st,
		At:          t,
		CallbackRef: s.Callback,
	}
	if st == state.Failed && present(s.Errors) {
		if s.Errors[0] != '[' {
			return malformed("%s: errors is not an array", at)
		}
		var errs []waError
		if err := json.Unmarshal(s.Errors, &errs); err != nil {
			return malformed("%s.errors: %v", at, err)
		}
		if len(errs) > 0 {
			ev.ErrorCode = code(errs[0].Code)
		}
		ev.Error = string(s.Errors)
	}
	b.Statuses = append(b.Statuses, Status{StatusEvidence: ev, PhoneNumberID: pnid})
	return nil
}

func (b *Batch) waMessage(at string, m *waMessage, pnid string) error {
	if m.ID == "" {
		return malformed("%s: no id", at)
	}
	if m.From == "" {
		// Meta is rolling out usernames: a user who hides their number
		// may come without one. Refusing the body would also refuse the
		// statuses batched with it, for the 7 days Meta retries; the raw
		// body is kept either way, so the message is listed for logs.
		b.Ignored = append(b.Ignored, fmt.Sprintf("%s: message %.100s without a from number", at, m.ID))
		return nil
	}
	// Meta sends bare digits; a plus is tolerated so it is not doubled.
	from := "+" + strings.TrimPrefix(m.From, "+")
	if !e164(from) {
		return malformed("%s: from %.40q is not a phone number", at, m.From)
	}
	_, t, err := unixSeconds(m.Timestamp)
	if err != nil {
		return malformed("%s: %v", at, err)
	}
	in := store.Inbound{
		Provider:          store.WebhookWhatsApp,
		ProviderMessageID: m.ID,
		From:              from,
		Type:              m.Type,
		ReceivedAt:        t,
	}
	if m.Context != nil {
		in.ContextID = m.Context.ID
	}
	switch {
	case m.Type == "text" && m.Text != nil:
		in.Text = m.Text.Body
	case m.Type == "interactive" && m.Interactive != nil:
		// Text stays empty: a reply is matched by its id, never its title.
		if r := m.Interactive.ButtonReply; r != nil {
			in.ReplyID, in.ReplyTitle = r.ID, r.Title
		} else if r := m.Interactive.ListReply; r != nil {
			in.ReplyID, in.ReplyTitle = r.ID, r.Title
		}
	case m.Type == "button" && m.Button != nil:
		in.ReplyID, in.ReplyTitle = m.Button.Payload, m.Button.Text
	default:
		in.Text = describe(m)
	}
	b.Inbound = append(b.Inbound, Message{Inbound: in, PhoneNumberID: pnid})
	return nil
}

// describe gives a short text for a message that is not text or a reply,
// so the inbox shows something: a caption, an emoji, a place. Decoding
// errors give "": the message is kept whatever its details look like.
func describe(m *waMessage) string {
	switch m.Type {
	case "image", "video", "document", "audio", "sticker":
		raw := map[string]json.RawMessage{
			"image": m.Image, "video": m.Video, "document": m.Document,
			"audio": m.Audio, "sticker": m.Sticker,
		}[m.Type]
		var media struct {
			Caption  string `json:"caption"`
			Filename string `json:"filename"`
		}
		_ = json.Unmarshal(raw, &media)
		if media.Caption != "" {
			return media.Caption
		}
		return media.Filename
	case "reaction":
		var r struct {
			Emoji string `json:"emoji"`
		}
		_ = json.Unmarshal(m.Reaction, &r)
		return r.Emoji
	case "location":
		var l struct {
			Latitude  json.Number `json:"latitude"`
			Longitude json.Number `json:"longitude"`
			Name      string      `json:"name"`
			Address   string      `json:"address"`
		}
		_ = json.Unmarshal(m.Location, &l)
		if s := joinNonEmpty(", ", l.Name, l.Address); s != "" {
			return s
		}
		if l.Latitude != "" && l.Longitude != "" {
			return l.Latitude.String() + "," + l.Longitude.String()
		}
	case "contacts":
		var cs []struct {
			Name struct {
				FormattedName string `json:"formatted_name"`
			} `json:"name"`
		}
		_ = json.Unmarshal(m.Contacts, &cs)
		names := make([]string, 0, len(cs))
		for _, c := range cs {
			names = append(names, c.Name.FormattedName)
		}
		return joinNonEmpty(", ", names...)
	case "order":
		var o struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Order, &o)
		return o.Text
	case "system":
		var s struct {
			Body string `json:"body"`
		}
		_ = json.Unmarshal(m.System, &s)
		return s.Body
	}
	return ""
}

func joinNonEmpty(sep string, parts ...string) string {
	kept := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, sep)
}

// errorCodes lists the codes of an errors array for a log line.
func errorCodes(raw json.RawMessage) string {
	var errs []waError
	if json.Unmarshal(raw, &errs) != nil {
		return "(unreadable)"
	}
	codes := make([]string, 0, len(errs))
	for _, e := range errs {
		c := code(e.Code)
		if c == "" {
			c = "?"
		}
		codes = append(codes, c)
	}
	return "[" + strings.Join(codes, " ") + "]"
}
