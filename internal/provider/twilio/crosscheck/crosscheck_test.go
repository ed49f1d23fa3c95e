// Package crosscheck checks msgq's Twilio webhook signatures against
// Twilio's official Go library, github.com/twilio/twilio-go. It is a module
// of its own so that the library (and what it brings) stays out of msgq's
// go.mod: run it with
//
//	cd internal/provider/twilio/crosscheck && go test ./...
package crosscheck

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"testing"

	twclient "github.com/twilio/twilio-go/client"
	"pgregory.net/rapid"

	"github.com/msgq/msgq/internal/provider/twilio"
)

// firstValues is the map twilio-go's Validate takes.
func firstValues(p url.Values) map[string]string {
	m := make(map[string]string, len(p))
	for k, v := range p {
		m[k] = v[0]
	}
	return m
}

func TestTheDocumentedExampleBothWays(t *testing.T) {
	u := "https://mycompany.com/myapp.php?foo=1&bar=2"
	p := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"},
		"From": {"+12349013030"}, "To": {"+18005551212"}}
	const sig = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
	v := twclient.NewRequestValidator("12345")
	if !v.Validate(u, firstValues(p), sig) {
		t.Fatal("twilio-go refuses the documented example")
	}
	if !twilio.ValidSignature(u, p, "12345", sig) {
		t.Fatal("msgq refuses the documented example")
	}
}

// Over random URLs, forms and tokens: twilio-go accepts what msgq signs,
// and both give the same verdict on the same (possibly wrong) signature.
func TestAgreementWithTwilioGo(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		token := rapid.StringN(1, 40, -1).Draw(t, "token")
		scheme := rapid.SampledFrom([]string{"https", "http"}).Draw(t, "scheme")
		port := rapid.SampledFrom([]string{"", ":443", ":80", ":8080"}).Draw(t, "port")
		path := "/" + rapid.StringMatching(`[a-z0-9/._-]{0,20}`).Draw(t, "path")
		query := rapid.StringMatching(`(msgq_id=[A-Z0-9]{1,26}(&x=[a-z]{0,5})?)?`).Draw(t, "query")
		u := scheme + "://hooks.example.com" + port + path
		if query != "" {
			u += "?" + query
		}
		params := url.Values{}
		for _, k := range rapid.SliceOfNDistinct(rapid.StringMatching(`[A-Za-z][A-Za-z0-9]{0,12}`), 0, 12, rapid.ID[string]).Draw(t, "names") {
			params.Set(k, rapid.String().Draw(t, "value"))
		}

		sig := twilio.Signature(u, params, token)
		v := twclient.NewRequestValidator(token)
		if !v.Validate(u, firstValues(params), sig) {
			t.Fatalf("twilio-go refuses msgq's signature of %q", u)
		}
		if !twilio.ValidSignature(u, params, token, sig) {
			t.Fatalf("msgq refuses its own signature of %q", u)
		}

		// The same verdict on a signature made for something else: another
		// URL spelling (a port added or removed), a tampered form, another
		// token.
		other := rapid.SampledFrom([]string{
			scheme + "://hooks.example.com" + path,
			scheme + "://hooks.example.com:443" + path,
			scheme + "://hooks.example.com:80" + path,
		}).Draw(t, "other")
		if query != "" {
			other += "?" + query
		}
		tampered := url.Values{}
		for k, vs := range params {
			tampered[k] = vs
		}
		if rapid.Bool().Draw(t, "tamper") {
			tampered.Set("Body", "STOP")
		}
		otherToken := token
		if rapid.Bool().Draw(t, "retoken") {
			otherToken += "x"
		}
		sig2 := twilio.Signature(other, tampered, otherToken)
		ours := twilio.ValidSignature(u, params, token, sig2)
		theirs := v.Validate(u, firstValues(params), sig2)
		if ours != theirs {
			t.Fatalf("msgq says %v, twilio-go %v, for %q signed as %q", ours, theirs, u, other)
		}
	})
}

func TestBodySHA256AgreesWithTwilioGo(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		body := []byte(rapid.String().Draw(t, "body"))
		sum := sha256.Sum256(body)
		u := "https://hooks.example.com/twilio?bodySHA256=" + hex.EncodeToString(sum[:])
		token := rapid.StringN(1, 20, -1).Draw(t, "token")
		sig := twilio.Signature(u, nil, token)
		if rapid.Bool().Draw(t, "tamper") {
			body = append(body, 'x')
		}
		v := twclient.NewRequestValidator(token)
		ours, theirs := twilio.ValidBodySignature(u, body, token, sig), v.ValidateBody(u, body, sig)
		if ours != theirs {
			t.Fatalf("msgq says %v, twilio-go %v", ours, theirs)
		}
	})
}
