package payload

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

const fixtures = "../../../testdata/webhooks"

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawValues returns, in order, the exact bytes of every value of key in a
// JSON body, found by scanning the text rather than by decoding it: what
// the parser keeps verbatim is checked against the file, not against
// encoding/json's idea of it.
func rawValues(t testing.TB, body []byte, key string) []string {
	t.Helper()
	var out []string
	needle := []byte(`"` + key + `":`)
	for rest := body; ; {
		i := bytes.Index(rest, needle)
		if i < 0 {
			return out
		}
		rest = bytes.TrimLeft(rest[i+len(needle):], " \t\r\n")
		n := valueEnd(rest)
		if n <= 0 {
			t.Fatalf("rawValues: no value after %s", needle)
		}
		out = append(out, string(rest[:n]))
		rest = rest[n:]
	}
}

// valueEnd is the length of the object or array b starts with.
func valueEnd(b []byte) int {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

func unix(s int64) time.Time { return time.Unix(s, 0).UTC() }

// Values shared by the WhatsApp fixtures.
const (
	pnid  = "106540352242922"
	pnid2 = "107182945517632"
	wamA  = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBJBNEMxMjNCMTYxMkREMjcyRDEA"
	wamB  = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBIyMTZGREFFRUI5NzU3MjlGQUUA"
	wamC  = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBI5MjNENUE0RkQxMkFBQkZFMjIA"
	wamF1 = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBIzNzFDMTcxNDlENDM5NTM2QjMA"
	wamF2 = "wamid.HBgMNDQ3NzAwOTAwMTIzFQIAERgSNEI0ODRFNzNDRjU3NURDQUQ2AA=="
	wamS2 = "wamid.HBgMNDQ3NzAwOTAwMTIzFQIAERgSQkEyQjBBRUUwQ0E5MjM3MzI4AA=="
	refA  = "01M8K8GPM0H2BH8VGS9ZM5H3BV"
	refB  = "01M8K8GSHR1G201CYFW6VZSKDE"
)

func waStatusWant(id, status string, st state.State, ts int64, ref, phone string) Status {
	return Status{
		StatusEvidence: store.StatusEvidence{
			Provider:    store.WebhookWhatsApp,
			DedupeKey:   fmt.Sprintf("%s|%s|%d", id, status, ts),
			ProviderID:  id,
			Status:      st,
			At:          unix(ts),
			CallbackRef: ref,
		},
		PhoneNumberID: phone,
	}
}

func waInboundWant(id string, ts int64, typ string, edit func(*store.Inbound)) Message {
	in := store.Inbound{
		Provider:          store.WebhookWhatsApp,
		ProviderMessageID: id,
		From:              "+16505551234",
		Type:              typ,
		ReceivedAt:        unix(ts),
	}
	if edit != nil {
		edit(&in)
	}
	return Message{Inbound: in, PhoneNumberID: pnid}
}

func checkBatch(t *testing.T, got, want *Batch) {
	t.Helper()
	if got == nil {
		t.Fatal("nil batch")
	}
	if len(got.Statuses) != len(want.Statuses) {
		t.Errorf("%d statuses, want %d: %+v", len(got.Statuses), len(want.Statuses), got.Statuses)
	}
	for i := 0; i < len(got.Statuses) && i < len(want.Statuses); i++ {
		if !reflect.DeepEqual(got.Statuses[i], want.Statuses[i]) {
			t.Errorf("status %d:\n got %+v\nwant %+v", i, got.Statuses[i], want.Statuses[i])
		}
	}
	if len(got.Inbound) != len(want.Inbound) {
		t.Errorf("%d inbound, want %d: %+v", len(got.Inbound), len(want.Inbound), got.Inbound)
	}
	for i := 0; i < len(got.Inbound) && i < len(want.Inbound); i++ {
		if !reflect.DeepEqual(got.Inbound[i], want.Inbound[i]) {
			t.Errorf("inbound %d:\n got %+v\nwant %+v", i, got.Inbound[i], want.Inbound[i])
		}
	}
	if !reflect.DeepEqual(got.Ignored, want.Ignored) {
		t.Errorf("ignored %q, want %q", got.Ignored, want.Ignored)
	}
	if !reflect.DeepEqual(got.Invalid, want.Invalid) {
		t.Errorf("invalid %q, want %q", got.Invalid, want.Invalid)
	}
}

func TestWhatsAppFixtures(t *testing.T) {
	failed := func(body []byte) *Batch {
		errs := rawValues(t, body, "errors")
		if len(errs) != 2 {
			t.Fatalf("status_failed.json: %d errors arrays, want 2", len(errs))
		}
		s1 := waStatusWant(wamF1, "failed", state.Failed, 1795946405, "01M8K8GQK84H15G5E4G7X0NTH8", pnid)
		s1.ErrorCode, s1.Error = "131026", errs[0]
		s2 := waStatusWant(wamF2, "failed", state.Failed, 1795946407, "01M8K8GRJG2F7AG3BCKKDJWBHP", pnid)
		s2.ErrorCode, s2.Error = "131047", errs[1]
		return &Batch{Statuses: []Status{s1, s2}}
	}
	tests := []struct {
		file string
		want func(body []byte) *Batch
	}{
		{"status_sent.json", func([]byte) *Batch {
			return &Batch{Statuses: []Status{waStatusWant(wamA, "sent", state.Sent, 1795946400, refA, pnid)}}
		}},
		{"status_delivered.json", func([]byte) *Batch {
			return &Batch{Statuses: []Status{waStatusWant(wamA, "delivered", state.Delivered, 1795946403, refA, pnid)}}
		}},
		{"status_read.json", func([]byte) *Batch {
			return &Batch{Statuses: []Status{waStatusWant(wamA, "read", state.Read, 1795946460, refA, pnid)}}
		}},
		{"status_failed.json", failed},
		{"statuses_batched.json", func([]byte) *Batch {
			return &Batch{Statuses: []Status{
				waStatusWant(wamB, "delivered", state.Delivered, 1795946410, refB, pnid),
				waStatusWant(wamA, "read", state.Read, 1795946412, refA, pnid),
				waStatusWant(wamS2, "sent", state.Sent, 1795946411, "01M8K8GTH0NC8SP3804GVA35RJ", pnid2),
				waStatusWant(wamC, "played", state.Read, 1795946415, "", pnid),
				waStatusWant(wamB, "read", state.Read, 1795946416, refB, pnid),
			}}
		}},
		{"statuses_one_invalid.json", func([]byte) *Batch {
			return &Batch{
				Statuses: []Status{waStatusWant(wamC, "delivered", state.Delivered, 1795946421, refA, pnid)},
				Invalid:  []string{"entry[0].changes[0].value.statuses[0]: no id"},
			}
		}},
		{"inbound_text.json", func([]byte) *Batch {
			return &Batch{Inbound: []Message{waInboundWant(
				"wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQ0M0IwMjZDNDhCQkYzM0ZFRkY5MgA=", 1795946500, "text",
				func(in *store.Inbound) { in.Text = "Hi, is my order ready for pickup?" })}}
		}},
		{"inbound_reply_context.json", func([]byte) *Batch {
			return &Batch{Inbound: []Message{waInboundWant(
				"wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQ0M0E4RjUwNkI0MDkyOEI1QjdBNwA=", 1795946520, "text",
				func(in *store.Inbound) { in.Text, in.ContextID = "Can I pick it up tomorrow instead?", wamA })}}
		}},
		{"inbound_button_reply.json", func([]byte) *Batch {
			return &Batch{Inbound: []Message{waInboundWant(
				"wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQ2N0M3NkZCMDA4Rjg2QkVCQjI3MwA=", 1795946530, "interactive",
				func(in *store.Inbound) { in.ReplyID, in.ReplyTitle, in.ContextID = "confirm_yes", "Yes, confirm", wamB })}}
		}},
		{"inbound_list_reply.json", func([]byte) *Batch {
			return &Batch{Inbound: []Message{waInboundWant(
				"wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQ3RjZBNkYwRkIyM0M2RjVEQTJDRQA=", 1795946540, "interactive",
				func(in *store.Inbound) { in.ReplyID, in.ReplyTitle, in.ContextID = "slot_0930", "09:30 - 10:00", wamB })}}
		}},
		{"inbound_quick_reply.json", func([]byte) *Batch {
			return &Batch{Inbound: []Message{waInboundWant(
				"wamid.HBgLMTY1MDU1NTEyMzQVAgASGBRDMjU1NDA0RTRGQjQ0MDAzNEQ2NgA=", 1795946550, "button",
				func(in *store.Inbound) {
					in.ReplyID, in.ReplyTitle, in.ContextID = "STOP_PROMOTIONS", "Stop promotions", wamS2
				})}}
		}},
		{"inbound_image.json", func([]byte) *Batch {
			return &Batch{Inbound: []Message{waInboundWant(
				"wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQwODY5N0E4RDQxQkVENDQwRTUwNAA=", 1795946560, "image",
				func(in *store.Inbound) { in.Text = "The box arrived damaged" })}}
		}},
	}
	files, _ := filepath.Glob(filepath.Join(fixtures, "whatsapp", "*.json"))
	if len(files) != len(tests) {
		t.Errorf("%d WhatsApp fixtures on disk, %d tested", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body := fixture(t, filepath.Join("whatsapp", tt.file))
			got, err := WhatsApp(body)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want(body)
			// Every fixture status names its recipient (recipient_id).
			for i := range want.Statuses {
				want.Statuses[i].Recipient = "+16505551234"
				if id := want.Statuses[i].ProviderID; id == wamF2 || id == wamS2 {
					want.Statuses[i].Recipient = "+447700900123"
				}
			}
			checkBatch(t, got, want)
		})
	}
}

// The failed fixture's Error must be the errors array exactly as written in
// the file (indentation and all), and only on the status it belongs to.
func TestWhatsAppFailedErrorIsVerbatim(t *testing.T) {
	body := fixture(t, "whatsapp/status_failed.json")
	got, err := WhatsApp(body)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"131026", "131047"} {
		s := got.Statuses[i]
		if s.ErrorCode != want {
			t.Errorf("status %d: ErrorCode %q, want %q", i, s.ErrorCode, want)
		}
		if !strings.HasPrefix(s.Error, "[\n") || !strings.Contains(s.Error, `"code": `+want) ||
			!bytes.Contains(body, []byte(s.Error)) {
			t.Errorf("status %d: Error is not the fixture's errors array verbatim:\n%s", i, s.Error)
		}
	}
	if strings.Contains(got.Statuses[0].Error, "131047") {
		t.Error("the first status's Error holds the second status's errors")
	}
}

// wa wraps one change value in the envelope.
func wa(value string) string {
	return `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","changes":[` +
		`{"field":"messages","value":{"messaging_product":"whatsapp",` +
		`"metadata":{"display_phone_number":"15550783881","phone_number_id":"106540352242922"},` + value + `}}]}]}`
}

// waMsg wraps one inbound message.
func waMsg(msg string) string {
	return wa(`"contacts":[{"profile":{"name":"Sheena Nelson"},"wa_id":"16505551234"}],"messages":[` + msg + `]`)
}

func waStatusBody(status string) string {
	return wa(`"statuses":[` + status + `]`)
}

const tsTest = 1795946600

func TestWhatsAppOtherMessageTypes(t *testing.T) {
	head := `"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600",`
	tests := []struct {
		name, msg string
		edit      func(*store.Inbound)
	}{
		{"reaction", `{` + head + `"type":"reaction","reaction":{"message_id":"wamid.TEST2","emoji":"\uD83D\uDC4D"}}`,
			func(in *store.Inbound) { in.Type, in.Text, in.ContextID = "reaction", "👍", "wamid.TEST2" }},
		{"reaction removed", `{` + head + `"type":"reaction","reaction":{"message_id":"wamid.TEST2"}}`,
			func(in *store.Inbound) { in.Type, in.ContextID = "reaction", "wamid.TEST2" }},
		{"location named", `{` + head + `"type":"location","location":{"latitude":37.4847,"longitude":-122.1473,"name":"Philz Coffee","address":"101 Forest Ave, Palo Alto, CA 94301"}}`,
			func(in *store.Inbound) {
				in.Type, in.Text = "location", "Philz Coffee, 101 Forest Ave, Palo Alto, CA 94301"
			}},
		{"location pin", `{` + head + `"type":"location","location":{"latitude":37.4847,"longitude":-122.1473}}`,
			func(in *store.Inbound) { in.Type, in.Text = "location", "37.4847,-122.1473" }},
		{"video without caption", `{` + head + `"type":"video","video":{"mime_type":"video/mp4","sha256":"abc","id":"1234"}}`,
			func(in *store.Inbound) { in.Type = "video" }},
		{"document", `{` + head + `"type":"document","document":{"filename":"invoice.pdf","mime_type":"application/pdf","id":"1234"}}`,
			func(in *store.Inbound) { in.Type, in.Text = "document", "invoice.pdf" }},
		{"voice note", `{` + head + `"type":"audio","audio":{"mime_type":"audio/ogg; codecs=opus","id":"1234","voice":true}}`,
			func(in *store.Inbound) { in.Type = "audio" }},
		{"sticker", `{` + head + `"type":"sticker","sticker":{"mime_type":"image/webp","id":"1234","animated":false}}`,
			func(in *store.Inbound) { in.Type = "sticker" }},
		{"contacts", `{` + head + `"type":"contacts","contacts":[{"name":{"formatted_name":"Barbara J. Johnson","first_name":"Barbara"},"phones":[{"phone":"+1 (940) 555-1234","type":"HOME"}]}]}`,
			func(in *store.Inbound) { in.Type, in.Text = "contacts", "Barbara J. Johnson" }},
		{"order", `{` + head + `"type":"order","order":{"catalog_id":"123","text":"Two please","product_items":[]}}`,
			func(in *store.Inbound) { in.Type, in.Text = "order", "Two please" }},
		{"unsupported", `{` + head + `"type":"unsupported","errors":[{"code":131051,"title":"Message type unknown","message":"Message type unknown","error_data":{"details":"Message type is currently not supported."}}],"unsupported":{"type":"edit"}}`,
			func(in *store.Inbound) { in.Type = "unsupported" }},
		{"system", `{` + head + `"type":"system","system":{"body":"User Sheena Nelson changed from 16505551234 to 16505559999","wa_id":"16505559999","type":"user_changed_number"}}`,
			func(in *store.Inbound) {
				in.Type, in.Text = "system", "User Sheena Nelson changed from 16505551234 to 16505559999"
			}},
		{"media details unreadable", `{` + head + `"type":"image","image":{"caption":42}}`,
			func(in *store.Inbound) { in.Type = "image" }},
		{"timestamp as a number", `{"from":"16505551234","id":"wamid.TEST1","timestamp":1795946600,"type":"text","text":{"body":"hi"}}`,
			func(in *store.Inbound) { in.Type, in.Text = "text", "hi" }},
		{"from with a plus", `{"from":"+16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"hi"}}`,
			func(in *store.Inbound) { in.Type, in.Text = "text", "hi" }},
		{"button reply without context", `{` + head + `"type":"interactive","interactive":{"type":"button_reply","button_reply":{"id":"b1","title":"One"}}}`,
			func(in *store.Inbound) { in.Type, in.ReplyID, in.ReplyTitle = "interactive", "b1", "One" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WhatsApp([]byte(waMsg(tt.msg)))
			if err != nil {
				t.Fatal(err)
			}
			checkBatch(t, got, &Batch{Inbound: []Message{waInboundWant("wamid.TEST1", tsTest, "", tt.edit)}})
		})
	}
}

// A message without a number (a user who hides it behind a username) is
// kept with From "", neither ignored nor invalid: it is a customer's words,
// and it comes batched with statuses that must be kept too.
func TestWhatsAppMessageWithoutFromIsKept(t *testing.T) {
	body := `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"metadata":{"phone_number_id":"2"},` +
		`"statuses":[{"id":"wamid.S1","status":"delivered","timestamp":"1795946600"}],` +
		`"messages":[{"id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"hi"}}]}}]}]}`
	got, err := WhatsApp([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	s := waStatusWant("wamid.S1", "delivered", state.Delivered, tsTest, "", "2")
	m := waInboundWant("wamid.TEST1", tsTest, "text", func(in *store.Inbound) { in.From, in.Text = "", "hi" })
	m.PhoneNumberID = "2"
	checkBatch(t, got, &Batch{Statuses: []Status{s}, Inbound: []Message{m}})
}

func TestWhatsAppStatuses(t *testing.T) {
	t.Run("numeric timestamp deduplicates with the string one", func(t *testing.T) {
		a, err := WhatsApp([]byte(waStatusBody(`{"id":"wamid.TEST1","status":"delivered","timestamp":1795946600}`)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := WhatsApp([]byte(waStatusBody(`{"id":"wamid.TEST1","status":"delivered","timestamp":"1795946600"}`)))
		if err != nil {
			t.Fatal(err)
		}
		if a.Statuses[0].DedupeKey != b.Statuses[0].DedupeKey || a.Statuses[0].DedupeKey != "wamid.TEST1|delivered|1795946600" {
			t.Errorf("keys %q and %q", a.Statuses[0].DedupeKey, b.Statuses[0].DedupeKey)
		}
	})
	t.Run("failed without errors", func(t *testing.T) {
		got, err := WhatsApp([]byte(waStatusBody(`{"id":"wamid.TEST1","status":"failed","timestamp":"1795946600"}`)))
		if err != nil {
			t.Fatal(err)
		}
		checkBatch(t, got, &Batch{Statuses: []Status{waStatusWant("wamid.TEST1", "failed", state.Failed, tsTest, "", pnid)}})
	})
	t.Run("errors on a status that is not failed are not kept", func(t *testing.T) {
		got, err := WhatsApp([]byte(waStatusBody(`{"id":"wamid.TEST1","status":"sent","timestamp":"1795946600","errors":[{"code":1}]}`)))
		if err != nil {
			t.Fatal(err)
		}
		checkBatch(t, got, &Batch{Statuses: []Status{waStatusWant("wamid.TEST1", "sent", state.Sent, tsTest, "", pnid)}})
	})
	t.Run("empty entry", func(t *testing.T) {
		got, err := WhatsApp([]byte(`{"object":"whatsapp_business_account","entry":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		checkBatch(t, got, &Batch{})
	})
}

// TestWhatsAppNoticesAreKept: what a body says about the account, a
// number or a template, and any field msgq does not know, is kept as a
// notice (issue 13 §3: nothing is dropped without a trace); status values
// msgq has no state for are still only ignored.
func TestWhatsAppNoticesAreKept(t *testing.T) {
	body := `{"object":"whatsapp_business_account","entry":[{"id":"102290129340398","time":1795946600,"changes":[
	  {"field":"account_update","value":{"phone_number":"15550783881","event":"VERIFIED_ACCOUNT"}},
	  {"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"phone_number_id":"106540352242922"},
	    "statuses":[
	      {"id":"wamid.TEST1","status":"sent","timestamp":"1795946600"},
	      {"id":"wamid.TEST2","status":"deleted","timestamp":"1795946601"},
	      {"id":"wamid.TEST3","status":"warning","timestamp":"1795946602"}]}},
	  {"field":"messages","value":{"messaging_product":"whatsapp","metadata":{"phone_number_id":"106540352242922"},
	    "errors":[{"code":130429,"title":"Rate limit hit","message":"(#130429) Rate limit hit","error_data":{"details":"x"}}]}},
	  {"field":"message_template_status_update","value":{"event":"APPROVED","message_template_id":1}},
	  {"field":"message_template_status_update","value":{"event":"PAUSED","message_template_id":2,"message_template_name":"order_update","message_template_language":"en_US","reason":"LOW_QUALITY"}},
	  {"field":"phone_number_quality_update","value":{"display_phone_number":"15550783881","event":"FLAGGED","current_limit":"TIER_1K"}},
	  {"field":"flows","value":{"event":"FLOW_STATUS_CHANGE"}}]}]}`
	got, err := WhatsApp([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, got, &Batch{
		Statuses: []Status{waStatusWant("wamid.TEST1", "sent", state.Sent, tsTest, "", pnid)},
		Ignored: []string{
			`entry[0].changes[1].value.statuses[1]: status "deleted" of wamid.TEST2`,
			`entry[0].changes[1].value.statuses[2]: status "warning" of wamid.TEST3`,
		},
	})
	type short struct{ kind, field, code, subject, lang, value, pnid string }
	var gotN []short
	keys := map[string]bool{}
	for _, n := range got.Notices {
		gotN = append(gotN, short{n.Kind, n.Field, n.Code, n.Subject, n.Lang, n.Value, n.PhoneNumberID})
		keys[n.DedupeKey] = true
		if n.Detail == "" || !n.At.Equal(unix(1795946600)) {
			t.Errorf("notice %+v: no detail or time", n)
		}
	}
	want := []short{
		{store.NoticeAccount, "account_update", "", "", "", "VERIFIED_ACCOUNT", ""},
		{store.NoticeError, "errors", "130429", "", "", "Rate limit hit", pnid},
		{store.NoticeUnknown, "message_template_status_update", "", "", "", "APPROVED", ""},
		{store.NoticeTemplate, "message_template_status_update", "", "order_update", "en_US", "PAUSED", ""},
		{store.NoticeQuality, "phone_number_quality_update", "", "15550783881", "", "FLAGGED TIER_1K", ""},
		{store.NoticeUnknown, "flows", "", "", "", "FLOW_STATUS_CHANGE", ""},
	}
	if !reflect.DeepEqual(gotN, want) {
		t.Errorf("notices\n got %+v\nwant %+v", gotN, want)
	}
	if len(keys) != len(want) {
		t.Errorf("dedupe keys are not distinct: %v", keys)
	}
	again, _ := WhatsApp([]byte(body))
	for i := range again.Notices {
		if again.Notices[i].DedupeKey != got.Notices[i].DedupeKey {
			t.Error("the same body must give the same dedupe keys (Meta redelivers the same bytes)")
		}
	}
}

// malformedWhatsApp are bodies whose envelope is not a WhatsApp webhook;
// the fuzz test is seeded with them too.
var malformedWhatsApp = []struct{ name, body string }{
	{"empty body", ``},
	{"not JSON", `object=whatsapp_business_account`},
	{"truncated", `{"object":"whatsapp_business_account","entry":[`},
	{"JSON array", `[{"object":"whatsapp_business_account","entry":[]}]`},
	{"JSON null", `null`},
	{"JSON string", `"whatsapp_business_account"`},
	{"trailing garbage", `{"object":"whatsapp_business_account","entry":[]} x`},
	{"not a webhook", `{"hello":"world"}`},
	{"wrong object", `{"object":"page","entry":[]}`},
	{"no object", `{"entry":[]}`},
	{"object not a string", `{"object":1,"entry":[]}`},
	{"no entry", `{"object":"whatsapp_business_account"}`},
	{"entry null", `{"object":"whatsapp_business_account","entry":null}`},
	{"entry an object", `{"object":"whatsapp_business_account","entry":{"changes":[]}}`},
	{"entry of strings", `{"object":"whatsapp_business_account","entry":["x"]}`},
	{"changes an object", `{"object":"whatsapp_business_account","entry":[{"changes":{}}]}`},
	{"change a number", `{"object":"whatsapp_business_account","entry":[{"changes":[1]}]}`},
	{"value missing", `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages"}]}]}`},
	{"value a string", `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":"x"}]}]}`},
	{"not UTF-8", waMsg("{\"from\":\"16505551234\",\"id\":\"wamid.TEST1\",\"timestamp\":\"1795946600\",\"type\":\"text\",\"text\":{\"body\":\"\xff\"}}")},
}

func TestWhatsAppMalformed(t *testing.T) {
	for _, tt := range malformedWhatsApp {
		t.Run(tt.name, func(t *testing.T) {
			b, err := WhatsApp([]byte(tt.body))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if b != nil {
				t.Errorf("a batch came with the error: %+v", b)
			}
		})
	}
}

var (
	long      = strings.Repeat("x", MaxID-len("wamid."))                        // a MaxID-byte wamid
	tooLong   = strings.Repeat("x", MaxID+1-len("wamid."))                      // one byte more
	leadZeros = strings.Repeat("0", MaxID-len("wamid.TEST1|sent|1795946600")+1) // a key one byte over
)

// invalidWhatsApp are statuses and messages msgq cannot use: each is
// skipped, named in Invalid, and costs nothing to the items batched with
// it. Exactly one of status and msg is set; want is the Invalid text
// after the item's path.
var invalidWhatsApp = []struct{ name, status, msg, want string }{
	{name: "status null", status: `null`, want: "not an object"},
	{name: "status a string", status: `"wamid.TEST1"`, want: "not an object"},
	{name: "status without id", status: `{"status":"sent","timestamp":"1795946600"}`, want: "no id"},
	{name: "status without status", status: `{"id":"wamid.TEST1","timestamp":"1795946600"}`, want: "no status"},
	{name: "status without timestamp", status: `{"id":"wamid.TEST1","status":"sent"}`, want: "no timestamp"},
	{name: "status timestamp null", status: `{"id":"wamid.TEST1","status":"sent","timestamp":null}`, want: "no timestamp"},
	{name: "status timestamp RFC 3339", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"2026-11-29T10:00:00Z"}`,
		want: `timestamp "2026-11-29T10:00:00Z" is not Unix seconds`},
	{name: "status timestamp in milliseconds past 9999", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"1795946600000000"}`,
		want: `timestamp "1795946600000000" is out of range`},
	{name: "status timestamp negative", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"-1"}`,
		want: `timestamp "-1" is not Unix seconds`},
	{name: "status timestamp fractional", status: `{"id":"wamid.TEST1","status":"sent","timestamp":1795946600.5}`,
		want: `timestamp "1795946600.5" is not Unix seconds`},
	{name: "status timestamp overflows", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"99999999999999999999"}`,
		want: `timestamp "99999999999999999999" is out of range`},
	{name: "status timestamp an object", status: `{"id":"wamid.TEST1","status":"sent","timestamp":{}}`,
		want: `timestamp "{}" is not Unix seconds`},
	{name: "status id a number", status: `{"id":12,"status":"sent","timestamp":"1795946600"}`, want: "id is a JSON number"},
	{name: "status callback an object", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"1795946600","biz_opaque_callback_data":{}}`,
		want: "biz_opaque_callback_data is a JSON object"},
	{name: "failed errors an object", status: `{"id":"wamid.TEST1","status":"failed","timestamp":"1795946600","errors":{"code":131026}}`,
		want: "errors is not an array"},
	{name: "failed errors of strings", status: `{"id":"wamid.TEST1","status":"failed","timestamp":"1795946600","errors":["x"]}`,
		want: "errors[] is a JSON string"},
	{name: "NUL in an id", status: `{"id":"wamid.\u0000","status":"sent","timestamp":"1795946600"}`, want: "a NUL character"},
	{name: "NUL in a callback", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"1795946600","biz_opaque_callback_data":"\u0000"}`,
		want: "a NUL character"},
	{name: "status id too long", status: `{"id":"wamid.` + tooLong + `","status":"sent","timestamp":"1795946600"}`,
		want: "id longer than 512 bytes"},
	{name: "status key too long", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"` + leadZeros + `1795946600"}`,
		want: "dedupe key longer than 512 bytes"},
	{name: "callback too long", status: `{"id":"wamid.TEST1","status":"sent","timestamp":"1795946600","biz_opaque_callback_data":"wamid.` + tooLong + `"}`,
		want: "callback ref longer than 512 bytes"},

	{name: "message null", msg: `null`, want: "not an object"},
	{name: "message without id", msg: `{"from":"16505551234","timestamp":"1795946600","type":"text","text":{"body":"hi"}}`, want: "no id"},
	{name: "message without timestamp", msg: `{"from":"16505551234","id":"wamid.TEST1","type":"text","text":{"body":"hi"}}`,
		want: "no timestamp"},
	{name: "message bad timestamp", msg: `{"from":"16505551234","id":"wamid.TEST1","timestamp":"yesterday","type":"text","text":{"body":"hi"}}`,
		want: `timestamp "yesterday" is not Unix seconds`},
	{name: "message from not a number", msg: `{"from":"sheena 16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"hi"}}`,
		want: "from is not a phone number"},
	{name: "message from too long", msg: `{"from":"1234567890123456","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"hi"}}`,
		want: "from is not a phone number"},
	{name: "message from a number", msg: `{"from":16505551234,"id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"hi"}}`,
		want: "from is a JSON number"},
	{name: "message text a string", msg: `{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":"hi"}`,
		want: "text is a JSON string"},
	{name: "message button reply id a number", msg: `{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"interactive","interactive":{"type":"button_reply","button_reply":{"id":1,"title":"One"}}}`,
		want: "interactive.button_reply.id is a JSON number"},
	{name: "NUL in a text", msg: `{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"a\u0000b"}}`,
		want: "a NUL character"},
	{name: "message id too long", msg: `{"from":"16505551234","id":"wamid.` + tooLong + `","timestamp":"1795946600","type":"text","text":{"body":"hi"}}`,
		want: "id longer than 512 bytes"},
	{name: "context id too long", msg: `{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"hi"},"context":{"id":"wamid.` + tooLong + `"}}`,
		want: "context id longer than 512 bytes"},
	{name: "reply id too long", msg: `{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"button","button":{"payload":"wamid.` + tooLong + `","text":"Stop"}}`,
		want: "reply id longer than 512 bytes"},
}

// goodStatus and goodMessage are batched with each invalid item.
const (
	goodStatus  = `{"id":"wamid.GOOD1","status":"delivered","timestamp":"1795946600"}`
	goodMessage = `{"from":"16505551234","id":"wamid.GOOD2","timestamp":"1795946600","type":"text","text":{"body":"ok"}}`
)

func TestWhatsAppInvalidItems(t *testing.T) {
	for _, tt := range invalidWhatsApp {
		t.Run(tt.name, func(t *testing.T) {
			// The bad item comes second among the statuses (after a good
			// one) or first among the messages (before a good one).
			statuses, messages, at := goodStatus, goodMessage, ""
			if tt.status != "" {
				statuses += "," + tt.status
				at = "entry[0].changes[0].value.statuses[1]"
			} else {
				messages = tt.msg + "," + messages
				at = "entry[0].changes[0].value.messages[0]"
			}
			got, err := WhatsApp([]byte(wa(`"statuses":[` + statuses + `],"messages":[` + messages + `]`)))
			if err != nil {
				t.Fatalf("err = %v, want the item skipped", err)
			}
			checkBatch(t, got, &Batch{
				Statuses: []Status{waStatusWant("wamid.GOOD1", "delivered", state.Delivered, tsTest, "", pnid)},
				Inbound: []Message{waInboundWant("wamid.GOOD2", tsTest, "text",
					func(in *store.Inbound) { in.Text = "ok" })},
				Invalid: []string{at + ": " + tt.want},
			})
		})
	}
}

// One bad status in a batch costs only itself: the good one beside it is
// returned, and the body is not refused (which would make Meta redeliver
// it for 7 days, then drop both).
func TestWhatsAppOneBadItemKeepsTheOthers(t *testing.T) {
	body := waStatusBody(`{"id":"wamid.TEST1","status":"sent","timestamp":"1795946600"},{"id":"wamid.TEST2","status":"sent"}`)
	got, err := WhatsApp([]byte(body))
	if err != nil {
		t.Fatalf("err = %v, want the bad status skipped", err)
	}
	checkBatch(t, got, &Batch{
		Statuses: []Status{waStatusWant("wamid.TEST1", "sent", state.Sent, tsTest, "", pnid)},
		Invalid:  []string{"entry[0].changes[0].value.statuses[1]: no timestamp"},
	})
}

// What a change holds besides its items: a list that is not an array costs
// that list; metadata that cannot be read costs the change (its items
// would be put down to the wrong identity), not the body.
func TestWhatsAppInvalidLists(t *testing.T) {
	other := `{"field":"messages","value":{"metadata":{"phone_number_id":"2"},"statuses":[{"id":"wamid.S2","status":"read","timestamp":"1795946600"}]}}`
	s2 := waStatusWant("wamid.S2", "read", state.Read, tsTest, "", "2")
	inGood := waInboundWant("wamid.GOOD2", tsTest, "text", func(in *store.Inbound) { in.Text = "ok" })
	inGood.PhoneNumberID = "1"
	tests := []struct {
		name, value string
		want        *Batch
	}{
		{"statuses an object", `"statuses":{"id":"wamid.TEST1"},"messages":[` + goodMessage + `]`, &Batch{
			Statuses: []Status{s2},
			Inbound:  []Message{inGood},
			Invalid:  []string{"entry[0].changes[0].value.statuses: not an array"},
		}},
		{"messages a string", `"statuses":[` + goodStatus + `],"messages":"hi"`, &Batch{
			Statuses: []Status{waStatusWant("wamid.GOOD1", "delivered", state.Delivered, tsTest, "", "1"), s2},
			Invalid:  []string{"entry[0].changes[0].value.messages: not an array"},
		}},
		{"metadata an array", `"metadata":[],"statuses":[` + goodStatus + `]`, &Batch{
			Statuses: []Status{s2},
			Invalid:  []string{"entry[0].changes[0].value.metadata: not an object"},
		}},
		{"phone_number_id a number", `"metadata":{"phone_number_id":1},"statuses":[` + goodStatus + `]`, &Batch{
			Statuses: []Status{s2},
			Invalid:  []string{"entry[0].changes[0].value.metadata: phone_number_id is a JSON number"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			value := tt.value
			if !strings.HasPrefix(value, `"metadata"`) {
				value = `"metadata":{"phone_number_id":"1"},` + value
			}
			body := `{"object":"whatsapp_business_account","entry":[{"changes":[{"field":"messages","value":{` + value + `}},` + other + `]}]}`
			got, err := WhatsApp([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			checkBatch(t, got, tt.want)
		})
	}
}

// Ids may be up to MaxID bytes, and no more.
func TestWhatsAppLengthCap(t *testing.T) {
	id := "wamid." + long
	got, err := WhatsApp([]byte(waMsg(`{"from":"16505551234","id":"` + id + `","timestamp":"1795946600","type":"text","text":{"body":"hi"},"context":{"id":"` + id + `"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, got, &Batch{Inbound: []Message{waInboundWant(id, tsTest, "text",
		func(in *store.Inbound) { in.Text, in.ContextID = "hi", id })}})
	// Texts have no cap of their own.
	text := strings.Repeat("é", 10*MaxID)
	got, err = WhatsApp([]byte(waMsg(`{"from":"16505551234","id":"wamid.TEST1","timestamp":"1795946600","type":"text","text":{"body":"` + text + `"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, got, &Batch{Inbound: []Message{waInboundWant("wamid.TEST1", tsTest, "text",
		func(in *store.Inbound) { in.Text = text })}})
}

// No text a log or a 400 body may carry quotes a sender's number, whatever
// it looks like.
func TestNoNumberInTexts(t *testing.T) {
	const digits = "6505551234"
	var texts []string
	for _, tt := range invalidWhatsApp {
		body := waStatusBody(tt.status)
		if tt.msg != "" {
			body = waMsg(tt.msg)
		}
		b, err := WhatsApp([]byte(body))
		if err != nil {
			texts = append(texts, err.Error())
			continue
		}
		texts = append(texts, b.Invalid...)
		texts = append(texts, b.Ignored...)
	}
	for _, tt := range invalidHTTP {
		b, err := HTTP([]byte(tt.body), tt.webhookID)
		if err != nil {
			texts = append(texts, err.Error())
			continue
		}
		texts = append(texts, b.Invalid...)
		texts = append(texts, b.Ignored...)
	}
	for _, tt := range malformedHTTP {
		if _, err := HTTP([]byte(tt.body), ""); err != nil {
			texts = append(texts, err.Error())
		}
	}
	for _, s := range texts {
		if strings.Contains(s, digits) || strings.Contains(s, "5551234567") || strings.Contains(s, "sheena") {
			t.Errorf("a number in %q", s)
		}
	}
}

func httpStatusWant(id, status string, st state.State, at time.Time, key, ref string) Status {
	return Status{StatusEvidence: store.StatusEvidence{
		Provider:    store.WebhookHTTP,
		DedupeKey:   key,
		ProviderID:  id,
		Status:      st,
		At:          at,
		CallbackRef: ref,
	}}
}

func TestHTTPFixtures(t *testing.T) {
	failedErr := rawValues(t, fixture(t, "http/status_failed.json"), "error")
	if len(failedErr) != 1 {
		t.Fatalf("http/status_failed.json: %d error objects, want 1", len(failedErr))
	}
	delivered := time.Date(2026, 11, 29, 10, 0, 2, 250e6, time.UTC)
	failed := httpStatusWant("msg_1043", "failed", state.Failed, time.Date(2026, 11, 29, 10, 0, 4, 0, time.UTC),
		"msg_1043|failed|2026-11-29T10:00:04Z", "01M8K8GVG8FJ2XBAHW0GQNMF2K")
	failed.ErrorCode, failed.Error = "window_closed", failedErr[0]
	failedWithID := failed
	failedWithID.DedupeKey = "wh:msg_2QJ4bW7yX9"

	inText := store.Inbound{
		Provider: store.WebhookHTTP, ProviderMessageID: "in_7781", From: "+15551234567", Type: "text",
		Text: "Is my order ready for pickup?", ReceivedAt: time.Date(2026, 11, 29, 10, 0, 5, 0, time.UTC),
	}
	inButton := store.Inbound{
		Provider: store.WebhookHTTP, ProviderMessageID: "in_7782", From: "+15551234567", Type: "button",
		ReplyID: "confirm_yes", ReplyTitle: "Yes, confirm", ContextID: "msg_1042",
		ReceivedAt: time.Date(2026, 11, 29, 9, 0, 9, 0, time.UTC),
	}
	tests := []struct {
		file, webhookID string
		want            *Batch
	}{
		{"status_delivered.json", "", &Batch{Statuses: []Status{httpStatusWant("msg_1042", "delivered", state.Delivered,
			delivered, "msg_1042|delivered|2026-11-29T10:00:02.250Z", refB)}}},
		{"status_delivered.json", "msg_2QJ4bW7yX8", &Batch{Statuses: []Status{httpStatusWant("msg_1042", "delivered", state.Delivered,
			delivered, "wh:msg_2QJ4bW7yX8", refB)}}},
		{"status_failed.json", "", &Batch{Statuses: []Status{failed}}},
		{"status_failed.json", "msg_2QJ4bW7yX9", &Batch{Statuses: []Status{failedWithID}}},
		{"inbound_text.json", "", &Batch{Inbound: []Message{{Inbound: inText}}}},
		{"inbound_text.json", "msg_2QJ4bW7yXA", &Batch{Inbound: []Message{{Inbound: inText}}}},
		{"inbound_button.json", "", &Batch{Inbound: []Message{{Inbound: inButton}}}},
	}
	files, _ := filepath.Glob(filepath.Join(fixtures, "http", "*.json"))
	tested := map[string]bool{}
	for _, tt := range tests {
		tested[tt.file] = true
		t.Run(tt.file+"/"+tt.webhookID, func(t *testing.T) {
			got, err := HTTP(fixture(t, filepath.Join("http", tt.file)), tt.webhookID)
			if err != nil {
				t.Fatal(err)
			}
			checkBatch(t, got, tt.want)
		})
	}
	if len(files) != len(tested) {
		t.Errorf("%d http fixtures on disk, %d tested", len(files), len(tested))
	}
}

func TestHTTPIgnored(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"accepted"}}`,
			`message.status: status "accepted" of msg_1`},
		{`{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"queued","previous_status":"accepted"}}`,
			`message.status: status "queued" of msg_1`},
		{`{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"played"}}`,
			`message.status: status "played" of msg_1`},
	}
	for _, tt := range tests {
		got, err := HTTP([]byte(tt.body), "msg_x")
		if err != nil {
			t.Errorf("%s: %v", tt.body, err)
			continue
		}
		checkBatch(t, got, &Batch{Ignored: []string{tt.want}})
	}
}

// TestHTTPUnknownTypesAreKept: an event type msgq does not read is a
// notice of kind unknown, body and all, deduplicated by its webhook-id.
func TestHTTPUnknownTypesAreKept(t *testing.T) {
	for _, body := range []string{`{"type":"endpoint.test","timestamp":"2026-11-29T10:00:00Z","data":{}}`, `{"type":"message.deleted"}`} {
		got, err := HTTP([]byte(body), "msg_x")
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		checkBatch(t, got, &Batch{})
		if len(got.Notices) != 1 || got.Notices[0].Kind != store.NoticeUnknown || got.Notices[0].Detail != body ||
			got.Notices[0].DedupeKey != "wh:msg_x" || !strings.HasPrefix(body, `{"type":"`+got.Notices[0].Field+`"`) {
			t.Errorf("%s: notices %+v", body, got.Notices)
		}
	}
}

func TestHTTPTimestamps(t *testing.T) {
	body := `{"type":"message.received","timestamp":"2026-11-29T10:00:05Z","data":{"id":"in_1","from":"+15551234567","timestamp":"2026-11-29T09:59:59.5-01:00"}}`
	got, err := HTTP([]byte(body), "")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 29, 10, 59, 59, 5e8, time.UTC); !got.Inbound[0].ReceivedAt.Equal(want) ||
		got.Inbound[0].ReceivedAt.Location() != time.UTC {
		t.Errorf("ReceivedAt %v, want %v in UTC", got.Inbound[0].ReceivedAt, want)
	}
	body = `{"type":"message.status","data":{"id":"msg_1","status":"read","timestamp":"2026-11-29T10:00:00Z"}}`
	got, err = HTTP([]byte(body), "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Statuses[0].DedupeKey != "msg_1|read|2026-11-29T10:00:00Z" {
		t.Errorf("DedupeKey %q", got.Statuses[0].DedupeKey)
	}
}

// malformedHTTP are bodies whose envelope is not an http provider event;
// the fuzz test is seeded with them too.
var malformedHTTP = []struct{ name, body string }{
	{"empty body", ``},
	{"not JSON", `type=message.status`},
	{"truncated", `{"type":"message.status","data":{`},
	{"JSON array", `[{"type":"message.status"}]`},
	{"JSON null", `null`},
	{"not a webhook", `{"hello":"world"}`},
	{"no type", `{"timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"sent"}}`},
	{"type not a string", `{"type":1,"data":{}}`},
	{"no data", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z"}`},
	{"data null", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":null}`},
	{"data an array", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":[]}`},
	{"bad timestamp", `{"type":"message.status","timestamp":"1795946400","data":{"id":"msg_1","status":"sent"}}`},
	{"timestamp past 9999 in UTC", `{"type":"message.status","timestamp":"9999-12-31T23:59:59-01:00","data":{"id":"msg_1","status":"sent"}}`},
	{"timestamp a number", `{"type":"message.status","timestamp":1795946400,"data":{"id":"msg_1","status":"sent"}}`},
	{"bad timestamp on another type", `{"type":"endpoint.test","timestamp":"now","data":{}}`},
	{"not UTF-8", "{\"type\":\"message.received\",\"timestamp\":\"2026-11-29T10:00:00Z\",\"data\":{\"id\":\"in_1\",\"from\":\"+15551234567\",\"text\":\"\xff\"}}"},
}

func TestHTTPMalformed(t *testing.T) {
	for _, tt := range malformedHTTP {
		t.Run(tt.name, func(t *testing.T) {
			b, err := HTTP([]byte(tt.body), "msg_x")
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if b != nil {
				t.Errorf("a batch came with the error: %+v", b)
			}
		})
	}
}

// invalidHTTP are events msgq cannot use: acknowledged, with nothing kept
// and the reason in Invalid.
var invalidHTTP = []struct{ name, body, webhookID, want string }{
	{"status without id", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"status":"sent"}}`, "", "no data.id"},
	{"status without status", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1"}}`, "", "no data.status"},
	{"status without timestamp", `{"type":"message.status","data":{"id":"msg_1","status":"sent"}}`, "", "no timestamp"},
	{"status bad data timestamp", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"sent","timestamp":"now"}}`, "",
		`timestamp "now" is not RFC 3339`},
	{"status data timestamp past 9999 in UTC", `{"type":"message.status","data":{"id":"msg_1","status":"sent","timestamp":"9999-12-31T23:59:59-01:00"}}`, "",
		`timestamp "9999-12-31T23:59:59-01:00" is out of range`},
	{"status id a number", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":1,"status":"sent"}}`, "", "data.id is a JSON number"},
	{"failed error a string", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"failed","error":"window_closed"}}`, "",
		"data.error is not an object"},
	{"NUL in a ref", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"sent","ref":"\u0000"}}`, "", "a NUL character"},
	{"status id too long", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"` + tooLong + `xxxxxx","status":"sent"}}`, "",
		"data.id longer than 512 bytes"},
	{"ref too long", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"sent","ref":"` + tooLong + `xxxxxx"}}`, "",
		"callback ref longer than 512 bytes"},
	{"key too long", `{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"sent"}}`, strings.Repeat("w", MaxID-2),
		"dedupe key longer than 512 bytes"},
	{"received without id", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"from":"+15551234567","text":"hi"}}`, "", "no data.id"},
	{"received without from", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","text":"hi"}}`, "", "data.from is not E.164"},
	{"from without plus", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"15551234567","text":"hi"}}`, "",
		"data.from is not E.164"},
	{"from with spaces", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"+1 555 123 4567","text":"hi"}}`, "",
		"data.from is not E.164"},
	{"from a name", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"sheena","text":"hi"}}`, "",
		"data.from is not E.164"},
	{"from too long", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"+1234567890123456","text":"hi"}}`, "",
		"data.from is not E.164"},
	{"from a number", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":15551234567,"text":"hi"}}`, "",
		"data.from is a JSON number"},
	{"received without timestamp", `{"type":"message.received","data":{"id":"in_1","from":"+15551234567","text":"hi"}}`, "", "no timestamp"},
	{"text a number", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"+15551234567","text":1}}`, "",
		"data.text is a JSON number"},
	{"NUL in a text", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"+15551234567","text":"\u0000"}}`, "",
		"a NUL character"},
	{"received id too long", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"` + tooLong + `xxxxxx","from":"+15551234567"}}`, "",
		"id longer than 512 bytes"},
	{"reply_to too long", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"+15551234567","reply_to":"` + tooLong + `xxxxxx"}}`, "",
		"context id longer than 512 bytes"},
	{"button_id too long", `{"type":"message.received","timestamp":"2026-11-29T10:00:00Z","data":{"id":"in_1","from":"+15551234567","button_id":"` + tooLong + `xxxxxx"}}`, "",
		"reply id longer than 512 bytes"},
}

func TestHTTPInvalid(t *testing.T) {
	for _, tt := range invalidHTTP {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HTTP([]byte(tt.body), tt.webhookID)
			if err != nil {
				t.Fatalf("err = %v, want the event skipped", err)
			}
			typ := TypeStatus
			if strings.Contains(tt.body, TypeReceived) {
				typ = TypeReceived
			}
			checkBatch(t, got, &Batch{Invalid: []string{typ + ": " + tt.want}})
		})
	}
	// The cap is on the key as kept: a webhook id that leaves it at
	// MaxID bytes is fine.
	got, err := HTTP([]byte(`{"type":"message.status","timestamp":"2026-11-29T10:00:00Z","data":{"id":"msg_1","status":"sent"}}`), strings.Repeat("w", MaxID-3))
	if err != nil || len(got.Statuses) != 1 || len(got.Statuses[0].DedupeKey) != MaxID {
		t.Errorf("a key of MaxID bytes: %+v, %v", got, err)
	}
}

// A WhatsApp body is not an http event and an http event is not a WhatsApp
// body: a webhook sent to the wrong endpoint is refused, not half read.
func TestProvidersRefuseEachOther(t *testing.T) {
	if _, err := HTTP(fixture(t, "whatsapp/status_sent.json"), ""); !errors.Is(err, ErrMalformed) {
		t.Errorf("HTTP(WhatsApp body): %v", err)
	}
	if _, err := WhatsApp(fixture(t, "http/status_delivered.json")); !errors.Is(err, ErrMalformed) {
		t.Errorf("WhatsApp(http body): %v", err)
	}
}
