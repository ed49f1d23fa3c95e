// Package phone turns what users type into E.164 numbers, once, on entry,
// and masks numbers for logs.
package phone

import (
	"fmt"
	"strings"

	"github.com/nyaruka/phonenumbers"
)

// Error is a number that cannot be used, named in the message.
type Error struct {
	Input string
	Why   string
}

func (e *Error) Error() string { return fmt.Sprintf("invalid phone number %q: %s", e.Input, e.Why) }

// Normalize returns raw as E.164 (+15551234567). A number without a leading
// "+" (or 00) is read as a local number of region, an ISO 3166 code such as
// "US" or "IL"; without a region it is refused rather than guessed.
//
// It checks that the number is possible for its country (length and
// prefix), not that it is assigned: carriers' allocations change faster
// than any library's metadata, and the fictional 555-01xx numbers used in
// examples must pass.
func Normalize(raw, region string) (string, error) { return normalize(raw, region, true) }

// normalize is Normalize; fast is false only in the tests that hold its
// fast path (parsePlusDigits) to the library's answers.
func normalize(raw, region string, fast bool) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", &Error{raw, "empty"}
	}
	region = strings.ToUpper(strings.TrimSpace(region))
	if !strings.HasPrefix(s, "+") {
		if region == "" {
			return "", &Error{raw, "a local number needs --region (e.g. --region US) or a leading +country code"}
		}
		if phonenumbers.GetCountryCodeForRegion(region) == 0 {
			return "", &Error{raw, fmt.Sprintf("unknown region %q", region)}
		}
	}
	if region == "" {
		region = "ZZ" // unknown: the number must carry its country code
	}
	var n *phonenumbers.PhoneNumber
	ok := false
	if fast {
		n, ok = parsePlusDigits(s)
	}
	if !ok {
		var err error
		if n, err = phonenumbers.Parse(s, region); err != nil {
			return "", &Error{raw, strings.ToLower(strings.TrimSuffix(err.Error(), "."))}
		}
	}
	switch phonenumbers.IsPossibleNumberWithReason(n) {
	case phonenumbers.IS_POSSIBLE:
	case phonenumbers.INVALID_COUNTRY_CODE:
		return "", &Error{raw, "unknown country code"}
	case phonenumbers.TOO_SHORT:
		return "", &Error{raw, "too short"}
	case phonenumbers.TOO_LONG:
		return "", &Error{raw, "too long"}
	default:
		return "", &Error{raw, "not a possible number for its country"}
	}
	return phonenumbers.Format(n, phonenumbers.E164), nil
}

// Mask hides the middle of a number for logs: +9725*****67.
func Mask(e164 string) string {
	const head, tail = 5, 2
	if len(e164) <= head+tail {
		return strings.Repeat("*", len(e164))
	}
	return e164[:head] + strings.Repeat("*", len(e164)-head-tail) + e164[len(e164)-tail:]
}
