package smtp

import (
	"bytes"
	"fmt"
	"strings"

	gomail "github.com/wneessen/go-mail"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/retry"
)

// MessageID is the Message-ID (without angle brackets) of msgq's message
// id sent From an address at fromDomain: recognisable in a duplicate, a
// bounce, or a mailbox, as the row it came from.
func MessageID(id, fromDomain string) string { return "msgq." + id + "@" + fromDomain }

// build renders m as an RFC 5322 message: From, To, Subject (RFC 2047
// encoded when not ASCII), Date, Message-ID, Auto-Submitted, and a
// text/plain body, or multipart/alternative with an HTML part, in UTF-8
// quoted-printable. A message that cannot be built is refused as
// Permanent without a call: sending it again cannot help.
func (c *Client) build(m *provider.Message) (raw []byte, msgID string, res provider.Result, ok bool) {
	refuse := func(format string, a ...any) ([]byte, string, provider.Result, bool) {
		return nil, "", provider.Result{Class: retry.Permanent, RawError: "msgq: " + fmt.Sprintf(format, a...)}, false
	}
	if err := recipient.Valid(recipient.Email, m.To); err != nil {
		return refuse("%v", err)
	}
	if !validIDText(m.ID) {
		return refuse("message id %q cannot be a Message-ID", m.ID)
	}
	p := m.Payload
	switch {
	case p.Template != "":
		return refuse("message %s names template %q: an email is sent rendered (subject and text; internal/mailtemplate)", m.ID, p.Template)
	case strings.TrimSpace(p.Subject) == "":
		return refuse("message %s has no subject", m.ID)
	case strings.ContainsAny(p.Subject, "\r\n"):
		// go-mail writes an ASCII subject as it is: a line break would
		// start a header of the sender's choosing.
		return refuse("message %s has a line break in its subject", m.ID)
	case p.Text == "":
		return refuse("message %s has no text body (an HTML part is an alternative to it, never alone)", m.ID)
	}

	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent(), gomail.WithCharset(gomail.CharsetUTF8),
		gomail.WithEncoding(gomail.EncodingQP))
	msg.FromMailAddress(c.from)
	if err := msg.To(m.To); err != nil {
		return refuse("%v", err)
	}
	msg.Subject(p.Subject)
	msg.SetDateWithValue(c.now())
	msgID = MessageID(m.ID, c.fromDomain)
	msg.SetMessageIDWithValue(msgID)
	// RFC 3834: vacation responders and the like do not answer it.
	msg.SetGenHeader("Auto-Submitted", "auto-generated")
	msg.SetBodyString(gomail.TypeTextPlain, p.Text)
	if p.HTML != "" {
		msg.AddAlternativeString(gomail.TypeTextHTML, p.HTML)
	}
	var buf bytes.Buffer
	// Built whole before the connection opens: a failure here is ours, and
	// DATA then writes bytes that are known to be complete.
	if _, err := msg.WriteTo(&buf); err != nil {
		return refuse("building the message: %v", err)
	}
	return buf.Bytes(), msgID, provider.Result{}, true
}

// validIDText says id can stand in a Message-ID's left-hand side
// (RFC 5322 dot-atom-text; msgq's ids are ULIDs).
func validIDText(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
		default:
			return false
		}
	}
	return true
}
