package twilio_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/webhook/payload"
)

var received = time.Date(2026, 12, 2, 10, 5, 0, 0, time.FixedZone("x", 3600))

const cbURL = "https://hooks.example.com/webhooks/twilio?msgq_id=01MSGQROW"

func statusForm(status, code string) url.Values {
	f := url.Values{
		"MessageSid":    {"SM0123456789abcdef0123456789abcdef"},
		"SmsSid":        {"SM0123456789abcdef0123456789abcdef"},
		"MessageStatus": {status},
		"SmsStatus":     {status},
		"AccountSid":    {accountSID},
		"From":          {sender},
		"To":            {recipient},
		"ApiVersion":    {"2010-04-01"},
	}
	if code != "" {
		f.Set("ErrorCode", code)
	}
	return f
}

func TestParseStatusCallback(t *testing.T) {
	for _, tc := range []struct {
		status string
		code   string
		want   state.State
	}{
		{"sent", "", state.Sent},
		{"sending", "", state.Sent},
		{"queued", "", state.Sent},
		{"delivered", "", state.Delivered},
		{"read", "", state.Read},
		{"undelivered", "30003", state.Failed},
		{"failed", "30007", state.Failed},
		{"canceled", "", state.Failed},
	} {
		t.Run(tc.status, func(t *testing.T) {
			b, err := twilio.ParseStatusCallback(cbURL, statusForm(tc.status, tc.code), received)
			if err != nil || len(b.Statuses) != 1 || len(b.Invalid)+len(b.Ignored) != 0 {
				t.Fatalf("batch %+v, err %v", b, err)
			}
			s := b.Statuses[0]
			if s.Provider != twilio.ProviderName || s.ProviderID != "SM0123456789abcdef0123456789abcdef" || s.Status != tc.want ||
				s.CallbackRef != "01MSGQROW" || s.Recipient != recipient || s.ErrorCode != tc.code ||
				!s.At.Equal(received) || s.At.Location() != time.UTC ||
				s.DedupeKey != "SM0123456789abcdef0123456789abcdef|"+tc.status {
				t.Errorf("status %+v", s.StatusEvidence)
			}
		})
	}
}

// A failure whose code is the identity's (30002: the account suspended)
// is also a notice, which pauses the identity; a failure of the message
// alone (30003) is only its status.
func TestAFailureOfTheAccountIsAlsoANoticeThatPauses(t *testing.T) {
	b, err := twilio.ParseStatusCallback(cbURL, statusForm("undelivered", "30002"), received)
	if err != nil || len(b.Statuses) != 1 || len(b.Notices) != 1 {
		t.Fatalf("30002: batch %+v, err %v; want its status and a notice", b, err)
	}
	n := b.Notices[0].Notice
	if n.Kind != store.NoticeError || n.Code != "30002" || n.Value != "undelivered" || n.Provider != twilio.ProviderName ||
		n.DedupeKey == "" || n.DedupeKey == b.Statuses[0].DedupeKey || !n.At.Equal(received) || strings.Contains(n.Detail, recipient) {
		t.Errorf("30002 notice %+v", n)
	}
	if !twilio.Kind.PausesOn("30002") {
		t.Error("Kind.PausesOn(30002) = false, want true: the notice would not pause the identity")
	}
	for _, tc := range []struct{ status, code string }{{"undelivered", "30003"}, {"failed", "30007"}, {"failed", "21610"}, {"delivered", ""}, {"failed", ""}} {
		b, err := twilio.ParseStatusCallback(cbURL, statusForm(tc.status, tc.code), received)
		if err != nil || len(b.Statuses) != 1 || len(b.Notices) != 0 {
			t.Errorf("%s %q: batch %+v, err %v; want the status alone", tc.status, tc.code, b, err)
		}
		if tc.code != "" && twilio.Kind.PausesOn(tc.code) {
			t.Errorf("Kind.PausesOn(%s) = true, want false", tc.code)
		}
	}
}

func TestParseStatusCallbackSkipsWhatItCannotUse(t *testing.T) {
	b, err := twilio.ParseStatusCallback(cbURL, statusForm("receiving", ""), received)
	if err != nil || len(b.Statuses) != 0 || len(b.Ignored) != 1 {
		t.Errorf("a status with no state: batch %+v, err %v", b, err)
	}
	f := statusForm("delivered", "")
	f.Del("MessageSid")
	f.Del("SmsSid")
	b, err = twilio.ParseStatusCallback(cbURL, f, received)
	if err != nil || len(b.Statuses) != 0 || len(b.Invalid) != 1 || !strings.Contains(b.Invalid[0], "no MessageSid") {
		t.Errorf("no sid: batch %+v, err %v", b, err)
	}
	f = statusForm("delivered", "")
	f.Set("MessageSid", strings.Repeat("S", payload.MaxID+1))
	if b, _ = twilio.ParseStatusCallback(cbURL, f, received); len(b.Invalid) != 1 {
		t.Errorf("an overlong sid: batch %+v", b)
	}
	f = statusForm("failed", "300\x0007")
	if b, _ = twilio.ParseStatusCallback(cbURL, f, received); len(b.Invalid) != 1 {
		t.Errorf("a NUL: batch %+v", b)
	}
	f = statusForm("delivered", "")
	f.Set("To", "whatsapp:+15551234567")
	b, _ = twilio.ParseStatusCallback("https://hooks.example.com/twilio", f, received)
	if len(b.Statuses) != 1 || b.Statuses[0].Recipient != "" || b.Statuses[0].CallbackRef != "" {
		t.Errorf("a non-E.164 To and no msgq_id: %+v", b)
	}
	for _, inv := range append(b.Invalid, b.Ignored...) {
		if strings.Contains(inv, recipient) {
			t.Errorf("%q quotes a number", inv)
		}
	}
	if _, err := twilio.ParseStatusCallback(cbURL, url.Values{"foo": {"bar"}}, received); !errors.Is(err, payload.ErrMalformed) {
		t.Errorf("not a callback: err %v", err)
	}
}

func inboundForm(body string) url.Values {
	return url.Values{
		"MessageSid":  {"SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		"SmsSid":      {"SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		"AccountSid":  {accountSID},
		"From":        {recipient},
		"To":          {sender},
		"Body":        {body},
		"NumMedia":    {"0"},
		"NumSegments": {"1"},
		"SmsStatus":   {"received"},
		"ApiVersion":  {"2010-04-01"},
	}
}

func TestParseInbound(t *testing.T) {
	b, err := twilio.ParseInbound(inboundForm("STOP"), received)
	if err != nil || len(b.Inbound) != 1 {
		t.Fatalf("batch %+v, err %v", b, err)
	}
	in := b.Inbound[0]
	if in.Provider != twilio.ProviderName || in.ProviderMessageID != "SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" || in.From != recipient ||
		in.Type != "text" || in.Text != "STOP" || !in.ReceivedAt.Equal(received) {
		t.Errorf("inbound %+v", in.Inbound)
	}
	f := inboundForm("")
	f.Set("NumMedia", "1")
	if b, _ := twilio.ParseInbound(f, received); len(b.Inbound) != 1 || b.Inbound[0].Type != "media" {
		t.Errorf("media: %+v", b)
	}
	f = inboundForm("hi")
	f.Set("From", "whatsapp:+15551234567")
	if b, _ := twilio.ParseInbound(f, received); len(b.Inbound) != 0 || len(b.Invalid) != 1 || strings.Contains(b.Invalid[0], "1555") {
		t.Errorf("non-E.164 sender: %+v", b)
	}
	if _, err := twilio.ParseInbound(url.Values{"x": {"y"}}, received); !errors.Is(err, payload.ErrMalformed) {
		t.Errorf("not an inbound message: err %v", err)
	}
}

func TestParseDispatchesOnTheStatus(t *testing.T) {
	b, err := twilio.Parse(cbURL, []byte(statusForm("delivered", "").Encode()), received)
	if err != nil || len(b.Statuses) != 1 || b.Statuses[0].CallbackRef != "01MSGQROW" {
		t.Errorf("status callback: %+v, %v", b, err)
	}
	b, err = twilio.Parse(cbURL, []byte(inboundForm("hello").Encode()), received)
	if err != nil || len(b.Inbound) != 1 {
		t.Errorf("inbound: %+v, %v", b, err)
	}
	for _, body := range []string{"\xff\xfe", "a=%zz"} {
		if _, err := twilio.Parse(cbURL, []byte(body), received); !errors.Is(err, payload.ErrMalformed) {
			t.Errorf("Parse(%q): err %v, want ErrMalformed", body, err)
		}
	}
}

func TestOptOutKeyword(t *testing.T) {
	for _, tc := range []struct {
		body       string
		out, optIn bool
	}{
		{"STOP", true, false}, {"stop", true, false}, {"  Stop\n", true, false},
		{"STOPALL", true, false}, {"UNSUBSCRIBE", true, false}, {"CANCEL", true, false},
		{"END", true, false}, {"QUIT", true, false},
		{"START", false, true}, {"yes", false, true}, {"UNSTOP", false, true},
		{"STOP PLEASE", false, false}, {"please stop", false, false}, {"HELP", false, false}, {"", false, false},
	} {
		out, in := twilio.OptOutKeyword(tc.body)
		if out != tc.out || in != tc.optIn {
			t.Errorf("OptOutKeyword(%q) = %v, %v; want %v, %v", tc.body, out, in, tc.out, tc.optIn)
		}
	}
}

func TestStatusStateCoversEveryDocumentedStatus(t *testing.T) {
	for s, want := range map[string]state.State{
		"queued": state.Sent, "accepted": state.Sent, "scheduled": state.Sent, "sending": state.Sent, "sent": state.Sent,
		"delivered": state.Delivered, "partially_delivered": state.Delivered, "read": state.Read,
		"undelivered": state.Failed, "failed": state.Failed, "canceled": state.Failed,
	} {
		if got, ok := twilio.StatusState(s); !ok || got != want {
			t.Errorf("StatusState(%q) = %v, %v; want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"receiving", "received", "", "DELIVERED"} {
		if _, ok := twilio.StatusState(s); ok {
			t.Errorf("StatusState(%q) has a state", s)
		}
	}
}
