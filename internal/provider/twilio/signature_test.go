package twilio_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/msgq/msgq/internal/provider/twilio"
)

// Twilio's documented example (https://www.twilio.com/docs/usage/security,
// "Validating signatures from Twilio"), also in docs/providers.md.
var (
	docURL    = "https://mycompany.com/myapp.php?foo=1&bar=2"
	docParams = url.Values{
		"CallSid": {"CA1234567890ABCDE"},
		"Caller":  {"+12349013030"},
		"Digits":  {"1234"},
		"From":    {"+12349013030"},
		"To":      {"+18005551212"},
	}
	docToken = "12345"
	docSig   = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
)

func TestSignatureMatchesTwiliosDocumentedExample(t *testing.T) {
	if got := twilio.Signature(docURL, docParams, docToken); got != docSig {
		t.Fatalf("Signature = %s, want %s", got, docSig)
	}
	if !twilio.ValidSignature(docURL, docParams, docToken, docSig) {
		t.Fatal("the documented signature does not validate")
	}
}

func TestValidSignatureRefusesAnyChange(t *testing.T) {
	changed := func(k, v string) url.Values {
		p := url.Values{}
		for kk, vv := range docParams {
			p[kk] = append([]string(nil), vv...)
		}
		if v == "" {
			p.Del(k)
		} else {
			p.Set(k, v)
		}
		return p
	}
	for _, tc := range []struct {
		name, url, token, sig string
		params                url.Values
	}{
		{"another token", docURL, "54321", docSig, docParams},
		{"another URL", "https://mycompany.com/myapp.php?foo=1&bar=3", docToken, docSig, docParams},
		{"http instead of https", "http://mycompany.com/myapp.php?foo=1&bar=2", docToken, docSig, docParams},
		{"a changed parameter", docURL, docToken, docSig, changed("Digits", "4321")},
		{"a removed parameter", docURL, docToken, docSig, changed("Digits", "")},
		{"an added parameter", docURL, docToken, docSig, changed("Body", "STOP")},
		{"an empty signature", docURL, docToken, "", docParams},
		{"an empty token", docURL, "", twilio.Signature(docURL, docParams, ""), docParams},
		{"a truncated signature", docURL, docToken, docSig[:len(docSig)-1], docParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if twilio.ValidSignature(tc.url, tc.params, tc.token, tc.sig) {
				t.Error("validated")
			}
		})
	}
}

func TestValidSignatureAcceptsTheURLWithOrWithoutItsDefaultPort(t *testing.T) {
	withPort := "https://mycompany.com:443/myapp.php?foo=1&bar=2"
	if !twilio.ValidSignature(withPort, docParams, docToken, docSig) {
		t.Error("signed without the port, checked with it: refused")
	}
	sigWithPort := twilio.Signature(withPort, docParams, docToken)
	if !twilio.ValidSignature(docURL, docParams, docToken, sigWithPort) {
		t.Error("signed with the port, checked without it: refused")
	}
	// As twilio-go: a URL naming a port is also checked without it.
	if !twilio.ValidSignature("https://mycompany.com:8443/myapp.php?foo=1&bar=2", docParams, docToken, docSig) {
		t.Error("signed without the port, checked with port 8443: refused (twilio-go accepts it)")
	}
	if twilio.ValidSignature("https://mycompany.com:8443/myapp.php?foo=1&bar=2", docParams, docToken, sigWithPort) {
		t.Error("signed with port 443, checked with port 8443: validated")
	}
}

func TestValidBodySignature(t *testing.T) {
	body := []byte(`{"MessageSid":"SM1","MessageStatus":"delivered"}`)
	sum := sha256.Sum256(body)
	u := "https://hooks.example.com/twilio?bodySHA256=" + hex.EncodeToString(sum[:])
	sig := twilio.Signature(u, nil, docToken)
	if !twilio.ValidBodySignature(u, body, docToken, sig) {
		t.Fatal("a JSON body with its bodySHA256 refused")
	}
	if twilio.ValidBodySignature(u, append(body, ' '), docToken, sig) {
		t.Error("a changed body validated")
	}
	// A form body falls back to the parameters.
	form := []byte(docParams.Encode())
	if !twilio.ValidBodySignature(docURL, form, docToken, docSig) {
		t.Error("a form body refused")
	}
}
