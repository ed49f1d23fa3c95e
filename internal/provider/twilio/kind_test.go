package twilio_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// kindVerifier builds the Kind's verifier for an identity whose auth token
// (auth_token_env: TW_TOKEN) is token.
func kindVerifier(t *testing.T, token string) provider.Verifier {
	t.Helper()
	s, err := twilio.Kind.Decode(map[string]any{"account_sid_env": "TW_SID", "auth_token_env": "TW_TOKEN", "from": sender})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.WebhookEnv(); len(got) != 1 || got[0] != (provider.Env{Key: "auth_token_env", Name: "TW_TOKEN"}) {
		t.Fatalf("WebhookEnv %+v, want the auth token's variable", got)
	}
	v, err := twilio.Kind.Webhook.Verifier(s, func(k string) string { return map[string]string{"TW_TOKEN": token}[k] })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func delivery(url string, body []byte, sig string) *provider.Delivery {
	h := http.Header{}
	if sig != "" {
		h.Set(twilio.SignatureHeader, sig)
	}
	return &provider.Delivery{Header: h, URL: url, Body: body}
}

// TestTheKindsVerifierChecksTwiliosDocumentedExample: Twilio's documented
// request (URL, form, token 12345, its signature) verifies; the same
// request under another token is a bad signature (the next identity may
// be tried), and an unsigned one is refused before its body is read. An
// identity whose token is unset gets no verifier at all.
func TestTheKindsVerifierChecksTwiliosDocumentedExample(t *testing.T) {
	body := []byte(docParams.Encode())
	v := kindVerifier(t, docToken)
	d := delivery(docURL, body, docSig)
	if err := v.Precheck(&provider.Delivery{Header: d.Header, URL: docURL}); err != nil {
		t.Errorf("Precheck of a signed request: %v", err)
	}
	if err := v.Verify(d); err != nil {
		t.Errorf("Verify of Twilio's documented request: %v", err)
	}
	if err := kindVerifier(t, "54321").Verify(d); !errors.Is(err, verify.ErrBadSignature) {
		t.Errorf("another token: %v, want ErrBadSignature", err)
	}
	if err := v.Verify(delivery("https://mycompany.com/myapp.php?foo=1&bar=3", body, docSig)); !errors.Is(err, verify.ErrBadSignature) {
		t.Errorf("another URL: %v, want ErrBadSignature", err)
	}
	if err := v.Precheck(delivery(docURL, nil, "")); !errors.Is(err, verify.ErrMissingSignature) {
		t.Errorf("unsigned: %v, want ErrMissingSignature", err)
	}
	if v := kindVerifier(t, ""); v != nil {
		t.Errorf("no token: verifier %+v, want none", v)
	}
}

// TestTheKindsParseReadsTheKeptURLAndTime: the Kind's Parse reads the URL
// and the receive time the receiver keeps with the delivery
// (provider.Webhook.KeepsCall), so the stored delivery parses the same
// later; one kept without a receive time is malformed. An inbound STOP or
// START says so.
func TestTheKindsParseReadsTheKeptURLAndTime(t *testing.T) {
	if !twilio.Kind.Webhook.KeepsCall {
		t.Fatal("the twilio kind does not ask for the URL and time to be kept")
	}
	at := received.UTC().Truncate(time.Microsecond)
	h := map[string]string{provider.HeaderURL: cbURL, provider.HeaderReceivedAt: at.Format(time.RFC3339Nano)}
	b, err := twilio.Kind.Webhook.Parse([]byte(statusForm("undelivered", "21610").Encode()), h)
	if err != nil || len(b.Statuses) != 1 {
		t.Fatalf("batch %+v, err %v", b, err)
	}
	st := b.Statuses[0]
	if st.CallbackRef != "01MSGQROW" || !st.At.Equal(at) || st.ErrorCode != "21610" || st.DedupeKey != st.ProviderID+"|undelivered" {
		t.Errorf("status %+v", st.StatusEvidence)
	}
	if !twilio.Kind.OptedOutOn(st.ErrorCode) || twilio.Kind.OptedOutOn("30006") {
		t.Error("OptedOutOn: 21610 and only 21610 says the recipient opted out")
	}
	for body, want := range map[string][2]bool{"stop": {true, false}, " START ": {false, true}, "stop please": {false, false}} {
		b, err := twilio.Kind.Webhook.Parse([]byte(inboundForm(body).Encode()), h)
		if err != nil || len(b.Inbound) != 1 {
			t.Fatalf("%q: batch %+v, err %v", body, b, err)
		}
		if m := b.Inbound[0]; m.OptOut != want[0] || m.OptIn != want[1] {
			t.Errorf("%q: opt-out %v, opt-in %v; want %v", body, m.OptOut, m.OptIn, want)
		}
	}
	if _, err := twilio.Kind.Webhook.Parse([]byte(statusForm("delivered", "").Encode()), map[string]string{provider.HeaderURL: cbURL}); !errors.Is(err, payload.ErrMalformed) {
		t.Errorf("no receive time kept: %v, want ErrMalformed", err)
	}
}
