// Package verify checks that a webhook body really comes from the provider
// that claims to have sent it, before anything in it is believed or stored.
//
// It is pure: no I/O, no clock (the caller passes now), no HTTP types. The
// server reads the headers and the raw body and hands them here, which keeps
// the cryptography testable with known-answer vectors and fuzzable on its own.
//
// Two schemes are supported:
//
//   - WhatsApp (Meta): X-Hub-Signature-256 = "sha256=" + hex(HMAC-SHA256(appSecret, body)).
//   - Standard Webhooks 1.0 (the http provider): webhook-id, webhook-timestamp and
//     webhook-signature = "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)),
//     where the key is the base64 part of a "whsec_..." secret.
//
// Every error returned by WhatsApp and Verify means "do not trust this body"
// (answer 401, store nothing), except ErrNoSecret, which is a configuration
// fault on our side and should not be blamed on the sender.
package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrMissingSignature: a required header (signature, id or timestamp) is
	// absent or empty. Kept apart from ErrBadSignature because an unsigned
	// request usually means a misconfigured sender, not a forgery.
	ErrMissingSignature = errors.New("verify: missing webhook signature header")

	// ErrBadSignature: a signature is present but malformed or matches none
	// of the secrets.
	ErrBadSignature = errors.New("verify: webhook signature does not match")

	// ErrStaleTimestamp: webhook-timestamp is further than the tolerance from
	// now, in the past (a replayed capture) or in the future (a clock that
	// would let a capture be replayed later).
	ErrStaleTimestamp = errors.New("verify: webhook timestamp outside tolerance")

	// ErrMalformedTimestamp: webhook-timestamp is not a decimal count of Unix seconds.
	ErrMalformedTimestamp = errors.New("verify: malformed webhook timestamp")

	// ErrMalformedSecret: ParseSecret was given something other than
	// "whsec_" followed by non-empty standard base64.
	ErrMalformedSecret = errors.New("verify: malformed whsec_ secret")

	// ErrNoSecret: no usable secret was configured. This is our fault, not
	// the sender's; a server should answer 500 so the provider retries once
	// the configuration is fixed.
	ErrNoSecret = errors.New("verify: no webhook secret configured")
)

// DefaultTolerance is the timestamp tolerance of the Standard Webhooks
// reference libraries; Verify uses it when given a tolerance <= 0.
const DefaultTolerance = 5 * time.Minute

const whatsAppPrefix = "sha256="

// WhatsApp checks an X-Hub-Signature-256 header ("sha256=<hex>") against the
// HMAC-SHA256 of the raw body keyed with the app secret.
//
// The body must be the exact bytes received: Meta signs its own encoding, and
// re-marshalled JSON would not match.
//
// Errors: ErrNoSecret (empty appSecret), ErrMissingSignature (empty header),
// ErrBadSignature (malformed header or wrong MAC).
func WhatsApp(body []byte, header string, appSecret []byte) error {
	// Checked first: with an empty key anyone can compute the MAC, so an
	// unconfigured secret must never verify anything.
	if len(appSecret) == 0 {
		return ErrNoSecret
	}
	got, err := whatsAppSignature(header)
	if err != nil {
		return err
	}
	// hmac.Equal runs in time independent of where the bytes differ, so an
	// attacker cannot learn the MAC one byte at a time from response times.
	if !hmac.Equal(got, whatsAppMAC(body, appSecret)) {
		return ErrBadSignature
	}
	return nil
}

// WhatsAppHeader checks only the form of an X-Hub-Signature-256 header, so
// that a server can refuse an unsigned or malformed request before it reads
// (and holds) the body. A nil answer proves nothing: WhatsApp must still
// check the MAC.
//
// Errors: ErrMissingSignature (empty header), ErrBadSignature (malformed).
func WhatsAppHeader(header string) error {
	_, err := whatsAppSignature(header)
	return err
}

func whatsAppSignature(header string) ([]byte, error) {
	if header == "" {
		return nil, ErrMissingSignature
	}
	hexMAC, ok := strings.CutPrefix(header, whatsAppPrefix)
	if !ok {
		return nil, ErrBadSignature
	}
	got, err := hex.DecodeString(hexMAC)
	if err != nil || len(got) != sha256.Size {
		return nil, ErrBadSignature
	}
	return got, nil
}

// SignWhatsApp returns the X-Hub-Signature-256 value Meta would send for
// body; for tests and the simulator.
func SignWhatsApp(body []byte, appSecret []byte) string {
	return whatsAppPrefix + hex.EncodeToString(whatsAppMAC(body, appSecret))
}

func whatsAppMAC(body, appSecret []byte) []byte {
	m := hmac.New(sha256.New, appSecret)
	m.Write(body)
	return m.Sum(nil)
}

// Secret is a Standard Webhooks signing key. Its zero value verifies nothing.
type Secret struct {
	key []byte
}

const secretPrefix = "whsec_"

// b64 is strict so that each MAC has one accepted spelling: the lenient
// decoder would also accept non-zero padding bits, which buys nothing and
// makes signatures malleable. (Even the strict decoder skips CR and LF; in
// Verify they cannot occur, as strings.Fields splits on them, and in
// ParseSecret tolerating a trailing newline from a secrets file is a kindness.)
var b64 = base64.StdEncoding.Strict()

// ParseSecret parses "whsec_<base64>". The prefix is required, so a secret
// pasted from the wrong place (or an unset variable) fails loudly at start-up
// rather than as a stream of 401s.
//
// Errors: ErrMalformedSecret.
func ParseSecret(s string) (Secret, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return Secret{}, ErrMalformedSecret
	}
	key, err := b64.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return Secret{}, ErrMalformedSecret
	}
	return Secret{key: key}, nil
}

// String hides the key so that a Secret printed in a log or an error does
// not leak it.
func (s Secret) String() string {
	if len(s.key) == 0 {
		return "whsec_(empty)"
	}
	return "whsec_(redacted)"
}

// GoString hides the key from %#v as well.
func (s Secret) GoString() string { return s.String() }

// Sign returns a webhook-signature value ("v1,<base64>") for one secret; for
// tests and the simulator. Several values may be joined with a space to sign
// with several secrets at once, as senders do during rotation.
func Sign(id, timestamp string, body []byte, s Secret) string {
	return "v1," + b64.EncodeToString(standardMAC(id, timestamp, body, s.key))
}

func standardMAC(id, timestamp string, body, key []byte) []byte {
	// Written piece by piece rather than concatenated, to avoid copying a
	// body that may be megabytes long.
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Headers checks the Standard Webhooks headers without the body: all three
// present, the timestamp well-formed and within tolerance of now. A server
// calls it before reading the body, so that a request Verify would refuse
// whatever its body is refused without holding the body. A nil answer
// proves nothing: Verify must still check the MAC.
//
// Errors: ErrMissingSignature, ErrMalformedTimestamp, ErrStaleTimestamp.
func Headers(id, timestamp, signatures string, now time.Time, tolerance time.Duration) error {
	if id == "" || timestamp == "" || signatures == "" {
		return ErrMissingSignature
	}
	// Digits only: ParseInt alone would take "+5" and "-5", spellings no
	// sender uses; refusing them keeps the header's meaning unambiguous.
	for i := 0; i < len(timestamp); i++ {
		if timestamp[i] < '0' || timestamp[i] > '9' {
			return ErrMalformedTimestamp
		}
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil { // more than 19 digits
		return ErrMalformedTimestamp
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	// Compare in seconds to avoid overflowing time.Duration for absurd
	// timestamps (time.Time.Sub saturates, but this is clearer).
	diff := now.Unix() - sec
	limit := int64(tolerance / time.Second)
	if diff > limit || diff < -limit {
		return ErrStaleTimestamp
	}
	return nil
}

// Verify checks a Standard Webhooks delivery: the three header values as
// received, the raw body, and the receiver's current time.
//
// Any secret may match any signature, so a key can be rotated on either side
// without a window where deliveries are refused: the receiver lists old and
// new secrets, the sender may send one "v1,..." signature per key separated
// by spaces. Signatures of other versions (e.g. "v1a," asymmetric ones) are
// ignored rather than refused, as the spec asks.
//
// The timestamp is checked before any MAC so that a replayed capture is
// refused even though its signature is genuine; it is signed, so it cannot be
// altered to pass. A tolerance <= 0 means DefaultTolerance.
//
// Errors: ErrMissingSignature (an empty header), ErrMalformedTimestamp,
// ErrStaleTimestamp, ErrNoSecret (no non-zero secret given), ErrBadSignature.
func Verify(id, timestamp, signatures string, body []byte, now time.Time, tolerance time.Duration, secrets ...Secret) error {
	if err := Headers(id, timestamp, signatures, now, tolerance); err != nil {
		return err
	}
	var want [][]byte
	for _, s := range secrets {
		if len(s.key) == 0 {
			continue
		}
		want = append(want, standardMAC(id, timestamp, body, s.key))
	}
	if len(want) == 0 {
		return ErrNoSecret
	}

	for _, field := range strings.Fields(signatures) {
		version, enc, ok := strings.Cut(field, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := b64.DecodeString(enc)
		if err != nil || len(got) != sha256.Size {
			continue
		}
		for _, w := range want {
			// Constant-time: see WhatsApp. Returning on the first match
			// reveals only which key matched, not anything about the MAC.
			if hmac.Equal(got, w) {
				return nil
			}
		}
	}
	return ErrBadSignature
}
