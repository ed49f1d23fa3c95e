package twilio

import (
	"fmt"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/webhook/payload"
	"github.com/msgq/msgq/internal/webhook/verify"
)

// Verifier checks X-Twilio-Signature with one identity's auth token, over
// the public URL Twilio called (provider.Delivery.URL) and the form.
type Verifier struct {
	AuthToken string
}

// verifier reads the identity's auth token. An empty one verifies nothing
// (ValidSignature never accepts it), so the identity gets no route.
func verifier(ps provider.Settings, getenv func(string) string) (provider.Verifier, error) {
	s := ps.(*Settings)
	tok := getenv(s.AuthTokenEnv)
	if tok == "" {
		return nil, nil
	}
	return &Verifier{AuthToken: tok}, nil
}

// Precheck refuses an unsigned request before its body is read.
func (v *Verifier) Precheck(d *provider.Delivery) error {
	if d.Header.Get(SignatureHeader) == "" {
		return fmt.Errorf("%w: no %s", verify.ErrMissingSignature, SignatureHeader)
	}
	return nil
}

// Verify checks the signature over the URL and the form (or, for a JSON
// body, the URL with its bodySHA256). A mismatch wraps
// verify.ErrBadSignature: another identity's token may be the one.
func (v *Verifier) Verify(d *provider.Delivery) error {
	if !ValidBodySignature(d.URL, d.Body, v.AuthToken, d.Header.Get(SignatureHeader)) {
		return fmt.Errorf("%w: %s", verify.ErrBadSignature, SignatureHeader)
	}
	return nil
}

// parseStored is the Kind's Parse: the body with the URL Twilio called and
// the time it was received, which the receiver keeps with the delivery
// (provider.Webhook.KeepsCall). A delivery without a readable receive time
// was not stored by the receiver nor by replay: malformed.
func parseStored(body []byte, h map[string]string) (*payload.Batch, error) {
	at, err := time.Parse(time.RFC3339Nano, h[provider.HeaderReceivedAt])
	if err != nil {
		return nil, malformed("no %s kept with the delivery", provider.HeaderReceivedAt)
	}
	return Parse(h[provider.HeaderURL], body, at)
}
