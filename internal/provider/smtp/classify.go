package smtp

import (
	"errors"
	"net"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

// The reply codes that mean our credentials or our auth setup, wherever
// they come: 530 authentication required, 534 mechanism too weak, 535
// credentials invalid, 538 encryption required for the mechanism
// (RFC 4954). Failing the row for them would fail every row.
func isAuthCode(code int) bool {
	return code == 530 || code == 534 || code == 535 || code == 538
}

func is2xx(code int) bool { return code >= 200 && code <= 299 }

// session classifies a failure before the server heard of this message's
// recipient: the greeting, EHLO, STARTTLS, AUTH and MAIL FROM. A 5xx
// there refuses us (our host, our credentials, our sender), not the
// message: Identity pauses the identity instead of failing every row in
// turn. A failure without a reply (reset, timeout, a certificate that does
// not verify) queued nothing: Transient.
func (c *Client) session(step string, err error) provider.Result {
	var te *textproto.Error
	if !errors.As(err, &te) {
		return transport(step, err)
	}
	res := reply(step, te)
	switch {
	case isAuthCode(te.Code), te.Code >= 500:
		res.Class = retry.Identity
	default:
		res.Class = retry.Transient
	}
	return res
}

// message classifies a failure about this message: RCPT TO, DATA and the
// reply to the final ".". 4xx is Transient, 5xx Permanent (550 5.1.1: no
// such mailbox). A failure without a reply here is still before the "."
// (the caller handles a lost reply to the "." itself): Transient.
func message(step string, err error) provider.Result {
	var te *textproto.Error
	if !errors.As(err, &te) {
		return transport(step, err)
	}
	res := reply(step, te)
	switch {
	case isAuthCode(te.Code):
		res.Class = retry.Identity
	case te.Code >= 500:
		res.Class = retry.Permanent
	case te.Code >= 400:
		res.Class = retry.Transient
	default:
		// 1xx/3xx where a 2xx was wanted: the server is confused, and
		// nothing is queued before the "." is accepted.
		res.Class = retry.Transient
	}
	return res
}

// transport is a failure without a reply before the final "." was
// written: the server cannot have queued the message.
func transport(step string, err error) provider.Result {
	return provider.Result{Class: retry.Transient, RawError: err.Error() + " [msgq: at " + step + "]"}
}

// reply carries an SMTP reply verbatim: Code, the enhanced status code as
// Subcode, and the reply text with the step it answered.
func reply(step string, te *textproto.Error) provider.Result {
	raw := strconv.Itoa(te.Code) + " " + te.Msg
	return provider.Result{
		Code:     strconv.Itoa(te.Code),
		Subcode:  enhancedCode(te.Code, te.Msg),
		RawError: raw + " [msgq: at " + step + "]",
	}
}

// enhancedRe is RFC 3463's status code at the start of the reply text.
var enhancedRe = regexp.MustCompile(`^([245])\.[0-9]{1,3}\.[0-9]{1,3}$`)

// enhancedCode returns the reply's enhanced status code ("5.1.1"), or ""
// when its text does not start with one whose class matches the reply
// code's.
func enhancedCode(code int, msg string) string {
	first, _, _ := strings.Cut(msg, " ")
	first, _, _ = strings.Cut(first, "\n")
	if !enhancedRe.MatchString(first) || first[0] != strconv.Itoa(code)[0] {
		return ""
	}
	return first
}

// isNetwork says err came from the connection rather than from a client
// refusing to go on.
func isNetwork(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "EOF")
}
