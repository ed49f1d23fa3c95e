package payload

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

type waBody struct {
	Object string `json:"object"`
	// Raw, so that a missing or null entry can be told from an empty one.
	Entry json.RawMessage `json:"entry"`
}

type waEntry struct {
	Time    json.RawMessage `json:"time"`
	Changes []waChange      `json:"changes"`
}

type waChange struct {
	Field string `json:"field"`
	// Raw: only "messages" values are read; other fields have other shapes.
	Value json.RawMessage `json:"value"`
}

// Raw throughout: each part is judged on its own, so that one bad item
// does not cost the others.
type waValue struct {
	Metadata json.RawMessage `json:"metadata"`
	Statuses json.RawMessage `json:"statuses"`
	Messages json.RawMessage `json:"messages"`
	// A system- or account-level problem (Meta's "errors" webhook), about
	// no message in particular.
	Errors json.RawMessage `json:"errors"`
}

type waMetadata struct {
	PhoneNumberID string `json:"phone_number_id"`
}

type waStatus struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"`
	Timestamp json.RawMessage `json:"timestamp"`
	Callback  string          `json:"biz_opaque_callback_data"`
	Recipient string          `json:"recipient_id"`
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
// message of every change of every entry, in order. Only an unreadable
// envelope is an error; items are skipped one by one (Batch.Invalid).
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
				batch.waNotice(c.Field, e.Time, c.Value)
				continue
			}
			if err := batch.waChange(at, e.Time, c.Value); err != nil {
				return nil, err
			}
		}
	}
	return batch, nil
}

func (b *Batch) waChange(at string, entryTime, raw json.RawMessage) error {
	if len(raw) == 0 || raw[0] != '{' {
		return malformed("%s.value is not an object", at)
	}
	var v waValue
	if err := json.Unmarshal(raw, &v); err != nil {
		return malformed("%s.value: %v", at, err)
	}
	// The number the items came through names their identity: without it
	// they would be put down to another, so the change is skipped whole.
	var md waMetadata
	if present(v.Metadata) {
		if v.Metadata[0] != '{' {
			b.invalid(at+".value.metadata", "not an object")
			return nil
		}
		if err := json.Unmarshal(v.Metadata, &md); err != nil {
			b.invalid(at+".value.metadata", "%s", decodeProblem("", err))
			return nil
		}
	}
	for k, item := range b.waItems(at+".value.statuses", v.Statuses) {
		b.waStatus(fmt.Sprintf("%s.value.statuses[%d]", at, k), item, md.PhoneNumberID)
	}
	for k, item := range b.waItems(at+".value.messages", v.Messages) {
		b.waMessage(fmt.Sprintf("%s.value.messages[%d]", at, k), item, md.PhoneNumberID)
	}
	if present(v.Errors) {
		// About the number or the account, not a message: each error is
		// a notice of the number's identity.
		var errs []json.RawMessage
		if v.Errors[0] != '[' || json.Unmarshal(v.Errors, &errs) != nil {
			errs = []json.RawMessage{v.Errors}
		}
		for _, e := range errs {
			var we struct {
				Code    json.RawMessage `json:"code"`
				Title   string          `json:"title"`
				Message string          `json:"message"`
			}
			_ = json.Unmarshal(e, &we)
			value := we.Title
			if value == "" {
				value = we.Message
			}
			b.Notices = append(b.Notices, Note{Notice: store.Notice{Provider: store.WebhookWhatsApp, Kind: store.NoticeError,
				Field: "errors", Code: text(code(we.Code)), Value: text(value), Detail: string(e),
				DedupeKey: noticeKey("errors", entryTime, e), At: entryAt(entryTime)}, PhoneNumberID: text(md.PhoneNumberID)})
		}
	}
	return nil
}

// waNotice reads a change that is not about messages: template status,
// number quality, account updates, and any field msgq does not know
// (kept as unknown). It never fails: whatever it is, it is kept.
func (b *Batch) waNotice(field string, entryTime, raw json.RawMessage) {
	var v struct {
		Event         string `json:"event"`
		Name          string `json:"message_template_name"`
		Language      string `json:"message_template_language"`
		Reason        string `json:"reason"`
		DisplayNumber string `json:"display_phone_number"`
		CurrentLimit  string `json:"current_limit"`
		PhoneNumberID string `json:"phone_number_id"`
		Decision      string `json:"decision"`
	}
	_ = json.Unmarshal(raw, &v)
	n := store.Notice{Provider: store.WebhookWhatsApp, Field: text(field), Kind: store.NoticeUnknown, Value: text(v.Event),
		Detail: string(raw), DedupeKey: noticeKey(field, entryTime, raw), At: entryAt(entryTime)}
	switch field {
	case "message_template_status_update":
		n.Kind, n.Subject, n.Lang = store.NoticeTemplate, text(v.Name), text(v.Language)
		if n.Subject == "" {
			n.Kind = store.NoticeUnknown // a template update that names no template
		}
	case "phone_number_quality_update":
		n.Kind, n.Subject = store.NoticeQuality, text(v.DisplayNumber)
		if v.CurrentLimit != "" {
			n.Value = text(strings.TrimSpace(v.Event + " " + v.CurrentLimit))
		}
	case "account_update", "account_review_update", "account_alerts", "business_capability_update", "security":
		n.Kind = store.NoticeAccount
		if n.Value == "" {
			n.Value = text(v.Decision)
		}
	}
	b.Notices = append(b.Notices, Note{Notice: n, PhoneNumberID: text(v.PhoneNumberID)})
}

// entryAt reads an entry's time (Unix seconds), zero when it has none.
func entryAt(raw json.RawMessage) time.Time {
	if _, t, err := unixSeconds(raw); err == nil {
		return t
	}
	return time.Time{}
}

// waItems splits a statuses or messages array into its items, still
// undecoded; a list that is not an array is named Invalid and gives none.
func (b *Batch) waItems(at string, raw json.RawMessage) []json.RawMessage {
	if !present(raw) {
		return nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		b.invalid(at, "not an array")
		return nil
	}
	return items
}

func (b *Batch) waStatus(at string, raw json.RawMessage, pnid string) {
	if raw[0] != '{' {
		b.invalid(at, "not an object")
		return
	}
	var s waStatus
	if err := json.Unmarshal(raw, &s); err != nil {
		b.invalid(at, "%s", decodeProblem("", err))
		return
	}
	if s.ID == "" {
		b.invalid(at, "no id")
		return
	}
	if len(s.ID) > MaxID {
		b.invalid(at, "id longer than %d bytes", MaxID)
		return
	}
	if s.Status == "" {
		b.invalid(at, "no status")
		return
	}
	ts, t, err := unixSeconds(s.Timestamp)
	if err != nil {
		b.invalid(at, "%v", err)
		return
	}
	st, ok := statusState(s.Status)
	if s.Status == "played" {
		// A voice message played has been read; "read" may never come.
		st, ok = state.Read, true
	}
	if !ok {
		b.Ignored = append(b.Ignored, fmt.Sprintf("%s: status %.40q of %.100s", at, s.Status, s.ID))
		return
	}
	ev := store.StatusEvidence{
		Provider:    store.WebhookWhatsApp,
		DedupeKey:   s.ID + "|" + s.Status + "|" + ts,
		ProviderID:  s.ID,
		Status:      st,
		At:          t,
		CallbackRef: s.Callback,
	}
	if s.Recipient != "" {
		// Meta names the recipient by bare digits (a wa_id); one that is
		// not a number (a group, a username) is not compared.
		if r := "+" + strings.TrimPrefix(s.Recipient, "+"); e164(r) {
			ev.Recipient = r
		}
	}
	if st == state.Failed && present(s.Errors) {
		if s.Errors[0] != '[' {
			b.invalid(at, "errors is not an array")
			return
		}
		var errs []waError
		if err := json.Unmarshal(s.Errors, &errs); err != nil {
			b.invalid(at, "%s", decodeProblem("errors[]", err))
			return
		}
		if len(errs) > 0 {
			ev.ErrorCode = code(errs[0].Code)
		}
		ev.Error = string(s.Errors)
	}
	kept := Status{StatusEvidence: ev, PhoneNumberID: pnid}
	if why := kept.unusable(); why != "" {
		b.invalid(at, "%s", why)
		return
	}
	b.Statuses = append(b.Statuses, kept)
}

func (b *Batch) waMessage(at string, raw json.RawMessage, pnid string) {
	if raw[0] != '{' {
		b.invalid(at, "not an object")
		return
	}
	var m waMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		b.invalid(at, "%s", decodeProblem("", err))
		return
	}
	if m.ID == "" {
		b.invalid(at, "no id")
		return
	}
	// Meta is rolling out usernames: a user who hides their number may
	// come without one. The message is kept with From "" (stored and
	// listed, opening no service window): it is still a customer's words.
	from := ""
	if m.From != "" {
		// Meta sends bare digits; a plus is tolerated so it is not doubled.
		from = "+" + strings.TrimPrefix(m.From, "+")
		if !e164(from) {
			// Not quoted: it may be most of someone's number.
			b.invalid(at, "from is not a phone number")
			return
		}
	}
	_, t, err := unixSeconds(m.Timestamp)
	if err != nil {
		b.invalid(at, "%v", err)
		return
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
	if m.Type == "reaction" && in.ContextID == "" {
		// A reaction names the message reacted to in reaction.message_id:
		// it is about that message as a reply is, and attributed the same
		// way.
		var r struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(m.Reaction, &r)
		in.ContextID = r.MessageID
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
		in.Text = describe(&m)
	}
	kept := Message{Inbound: in, PhoneNumberID: pnid}
	if why := kept.unusable(); why != "" {
		b.invalid(at, "%s", why)
		return
	}
	b.Inbound = append(b.Inbound, kept)
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
