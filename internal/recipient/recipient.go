// Package recipient validates, normalises and masks the address a message
// goes to, per channel: an E.164 number for whatsapp and sms, an RFC 5322
// address for email. It is the one place that knows what an address of a
// channel looks like: the CLI normalises through it once, on entry, and
// the store checks through it before anything is written.
package recipient

import (
	"fmt"
	"net/mail"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/msgq/msgq/internal/phone"
)

// The channels msgq knows addresses of.
const (
	WhatsApp = "whatsapp"
	SMS      = "sms"
	Email    = "email"
)

// Error is an address that cannot be used on its channel, named in the
// message. Phone channels return *phone.Error instead, as before.
type Error struct {
	Channel, Input, Why string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid %s address %q: %s", e.Channel, e.Input, e.Why)
}

// IsPhone says the channel's addresses are phone numbers.
func IsPhone(channel string) bool { return channel == WhatsApp || channel == SMS }

// Known says msgq knows what an address of channel looks like.
func Known(channel string) bool { return IsPhone(channel) || channel == Email }

// Normalize returns raw in the channel's one stored form: E.164 for a
// phone channel (a local number is read as one of region), the bare
// addr-spec with its domain in lower case and as an IDNA A-label for
// email ("Ada <Ada@Example.COM>" is "Ada@example.com", "ada@Bücher.example"
// is "ada@xn--bcher-kva.example": the local part is the mail server's to
// interpret, the domain is not case-sensitive).
func Normalize(channel, raw, region string) (string, error) {
	switch {
	case IsPhone(channel):
		return phone.Normalize(raw, region)
	case channel == Email:
		return normalizeEmail(raw)
	}
	return "", &Error{channel, raw, "unknown channel"}
}

func normalizeEmail(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", &Error{Email, raw, "empty"}
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", &Error{Email, raw, "contains a line break"}
	}
	a, err := mail.ParseAddress(s)
	if err != nil {
		return "", &Error{Email, raw, strings.TrimPrefix(err.Error(), "mail: ")}
	}
	local, domain, ok := strings.Cut(a.Address, "@")
	if !ok || local == "" || domain == "" {
		return "", &Error{Email, raw, "not an address like ada@example.com"}
	}
	if strings.HasPrefix(domain, "[") || !strings.Contains(domain, ".") {
		// A literal IP or a single-label host is legal in RFC 5322 and
		// never what a sender of customer mail means.
		return "", &Error{Email, raw, "the domain must be a fully qualified name like example.com"}
	}
	// An internationalised domain is stored as its A-label
	// (bücher.example is xn--bcher-kva.example): one spelling per domain,
	// so a duplicate check and a suppression list see one address, and
	// any mail server can route it without SMTPUTF8. The lookup profile
	// also maps case, so the domain comes back in lower case.
	ascii, err := idna.Lookup.ToASCII(domain)
	if err != nil {
		return "", &Error{Email, raw, "the domain is not a valid host name: " + strings.TrimPrefix(err.Error(), "idna: ")}
	}
	return local + "@" + strings.ToLower(ascii), nil
}

// Valid checks an address already in its stored form: what Normalize
// returns for the channel, and nothing else.
func Valid(channel, addr string) error {
	switch {
	case IsPhone(channel):
		if !validE164(addr) {
			return &Error{channel, addr, "must be an E.164 number like +15551234567"}
		}
		return nil
	case channel == Email:
		n, err := normalizeEmail(addr)
		if err != nil {
			return err
		}
		if n != addr {
			return &Error{Email, addr, "not in its normal form (" + n + ")"}
		}
		return nil
	}
	return &Error{channel, addr, "unknown channel"}
}

// validE164 is the shape of an E.164 number: +, a non-zero digit, 7 to 15
// digits in all.
func validE164(s string) bool {
	if len(s) < 8 || len(s) > 16 || s[0] != '+' || s[1] == '0' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Mask hides most of an address for logs: +1555*****67, a***@example.com.
func Mask(channel, addr string) string {
	if channel == Email {
		local, domain, ok := strings.Cut(addr, "@")
		if !ok || local == "" {
			return strings.Repeat("*", len(addr))
		}
		// The first character, not byte: a UTF-8 local part (RFC 6531)
		// must not be cut mid-rune into invalid text in a log line.
		_, n := utf8.DecodeRuneInString(local)
		return local[:n] + "***@" + domain
	}
	return phone.Mask(addr)
}
