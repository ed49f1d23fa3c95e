package twilio

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"

	"github.com/msgq/msgq/internal/provider"
)

// SignatureHeader is the header Twilio signs its webhooks in.
const SignatureHeader = "X-Twilio-Signature"

// Signature is Twilio's webhook signature of a form POST to fullURL with
// params, keyed by authToken: base64(HMAC-SHA1(authToken, fullURL followed
// by every parameter sorted by name, name and value concatenated with no
// separator)), as https://www.twilio.com/docs/usage/security#validating-requests
// describes. fullURL is the URL exactly as Twilio called it, query
// included. A name given several values contributes each, values sorted,
// as Twilio's Python library does (twilio-go uses only the first; status
// callbacks and SMS never repeat a name).
func Signature(fullURL string, params url.Values, authToken string) string {
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(signed(fullURL, params)))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signed is what Signature signs: fullURL, then each parameter's name and
// value, sorted.
func signed(fullURL string, params url.Values) string {
	var b strings.Builder
	b.WriteString(fullURL)
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := slices.Clone(params[k])
		slices.Sort(vs)
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(v)
		}
	}
	return b.String()
}

// dedupeKey is the Kind's Webhook.Dedupe: a delivery named by what its
// signature covers, so that every copy a signature verifies has the same
// key. Twilio signs the URL and the form's parameters, not the body's
// bytes: a form's fields reordered, or spelt with other escapes
// (%41 for A, + or %20), verify alike, so the key digests the signed
// string, not the body. Nor does it sign I-Twilio-Idempotency-Token. The
// URL is taken in one of the two spellings a signature accepts (with or
// without the default port, urlVariants), the same for either. A JSON
// body (bodySHA256 in the signed URL) is pinned by its hash: the URL and
// the body name it.
func dedupeKey(body []byte, h map[string]string) string {
	u := slices.Min(urlVariants(h[provider.HeaderURL]))
	if pu, err := url.Parse(u); err == nil && pu.Query().Get("bodySHA256") == "" {
		if form, err := url.ParseQuery(string(body)); err == nil {
			return provider.DigestKey("signed", []byte(signed(u, form)))
		}
	}
	return provider.DigestKey("url+body", []byte(u), body)
}

// ValidSignature says signature (the X-Twilio-Signature header) is
// Twilio's signature of a form POST to fullURL with params under
// authToken. The comparison is constant-time. Because Twilio may sign the
// URL with or without its port, both spellings are accepted, as Twilio's
// libraries accept them (urlVariants). An empty token or signature never
// validates.
func ValidSignature(fullURL string, params url.Values, authToken, signature string) bool {
	if authToken == "" || signature == "" {
		return false
	}
	ok := false
	for _, u := range urlVariants(fullURL) {
		// No early exit: every variant is computed and compared.
		if subtle.ConstantTimeCompare([]byte(Signature(u, params, authToken)), []byte(signature)) == 1 {
			ok = true
		}
	}
	return ok
}

// ValidBodySignature checks a webhook whose body is not a form (JSON):
// Twilio then signs the URL alone, and the URL's bodySHA256 query
// parameter is the hex SHA-256 of the body. A form body (no bodySHA256)
// is checked as ValidSignature with its parameters.
func ValidBodySignature(fullURL string, body []byte, authToken, signature string) bool {
	u, err := url.Parse(fullURL)
	if err != nil {
		return false
	}
	want := u.Query().Get("bodySHA256")
	if want == "" {
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return false
		}
		return ValidSignature(fullURL, form, authToken, signature)
	}
	sum := sha256.Sum256(body)
	bodyOK := subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(strings.ToLower(want))) == 1
	return ValidSignature(fullURL, nil, authToken, signature) && bodyOK
}

// urlVariants is fullURL as given and, as Twilio's Go library checks it
// (github.com/twilio/twilio-go, client.RequestValidator), its other
// spelling: with the scheme's default port added when it names none, or
// with its port removed when it names one.
func urlVariants(fullURL string) []string {
	u, err := url.Parse(fullURL)
	if err != nil || u.Host == "" {
		return []string{fullURL}
	}
	v := *u
	if u.Port() == "" {
		def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
		if def == "" {
			return []string{fullURL}
		}
		v.Host = u.Host + ":" + def
	} else {
		v.Host = u.Hostname()
		if strings.Contains(v.Host, ":") { // IPv6
			v.Host = "[" + v.Host + "]"
		}
	}
	return []string{fullURL, v.String()}
}
