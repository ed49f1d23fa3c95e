// Package queue is msgq's use cases above the store: what a valid send is
// and how it becomes store parameters (admission), written once for every
// way a send comes in (msgq send and send --file, msgq serve's API, and
// the rows PostgreSQL's enqueue() takes in; docs/sql-enqueue.md).
package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/msgq/msgq/internal/duration"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/mailtemplate"
	"github.com/msgq/msgq/internal/phone"
	"github.com/msgq/msgq/internal/quiet"
	"github.com/msgq/msgq/internal/recipient"
	"github.com/msgq/msgq/internal/sms"
	"github.com/msgq/msgq/internal/store"
)

// Spec is one message as a user writes it: the flags of `msgq send`,
// and one line of `msgq send --file` (the JSON field names are a contract).
type Spec struct {
	Key              string   `json:"key"`
	To               string   `json:"to"`
	Region           string   `json:"region"`
	Channel          string   `json:"channel"`
	Identity         string   `json:"identity"`
	Template         string   `json:"template"`
	Lang             string   `json:"lang"`
	Params           []string `json:"params"`
	Text             string   `json:"text"`
	Subject          string   `json:"subject"`
	FallbackTemplate string   `json:"fallback_template"`
	FallbackParams   []string `json:"fallback_params"`
	Purpose          string   `json:"purpose"`
	Ref              string   `json:"ref"`
	Lane             string   `json:"lane"`
	NotBefore        string   `json:"not_before"`
	ExpiresIn        string   `json:"expires_in"`
	ExpiresAt        string   `json:"expires_at"`
	Tenant           string   `json:"tenant"`
	QuietHours       string   `json:"quiet_hours"`
	// A --file line's challenge (docs/challenges.md): its later steps and
	// options, as send's --then flags say them.
	Steps               []Step `json:"steps"`
	AcceptDuplicateRisk bool   `json:"accept_duplicate_risk"`
	ThenIfUndelivered   bool   `json:"then_if_undelivered"`
	Supersedes          string `json:"supersedes"`
}

// DefaultLang is the template language when none is given.
const DefaultLang = "en"

// Defaults fill what a spec leaves empty (from flags and config).
type Defaults struct {
	Tenant, Identity, Channel, Region, Lane, Purpose string
	// QuietHours is send --quiet-hours: every line's unless it says.
	QuietHours string
	// Identities are the configured identities: a row's identity must be
	// one of them, and its channel one its identity sends on.
	Identities map[string]*identities.Identity
	// Templates caches the email template sets read in this run, by
	// directory (a --file of many lines reads each directory once); nil:
	// no cache.
	Templates map[string]*mailtemplate.Set
}

// Admit turns a spec into store parameters. Times given as durations
// ("5m") stay durations: the store resolves them on its own clock (on
// PostgreSQL the database server's, which every drain shares), so a
// sender whose host clock is wrong schedules right. An absolute deadline
// already past on this host's clock (now) is refused here, before the
// store is opened; the store judges again on its own clock. Errors are bad
// input (exit 2) and name the field.
func (s *Spec) Admit(now time.Time, d Defaults) (store.EnqueueParams, error) {
	pick := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	p := store.EnqueueParams{
		Tenant:     pick(s.Tenant, d.Tenant),
		Key:        s.Key,
		Channel:    pick(s.Channel, d.Channel),
		Identity:   pick(s.Identity, d.Identity),
		Purpose:    pick(s.Purpose, d.Purpose),
		TriggerRef: s.Ref,
		Lane:       pick(s.Lane, d.Lane),
		Payload: store.Payload{Template: s.Template, Lang: s.Lang, Params: s.Params, Text: s.Text,
			FallbackTemplate: s.FallbackTemplate, FallbackParams: s.FallbackParams},
	}
	if p.Payload.Template != "" && p.Payload.Lang == "" {
		p.Payload.Lang = DefaultLang
	}
	// The key first: it is what a user searches their input for.
	if p.Key == "" {
		return p, &store.InvalidError{Field: "key", Msg: "is required"}
	}
	if !store.ValidKey(p.Key) {
		return p, &store.InvalidError{Field: "key", Msg: fmt.Sprintf("%q must be 1 to 64 characters of A-Za-z0-9._:-", p.Key)}
	}
	// Invalid UTF-8 (a --text from a shell in another encoding, say) would
	// be replaced with U+FFFD when stored: refuse it instead.
	for _, f := range []struct{ name, v string }{{"text", s.Text}, {"template", s.Template}, {"lang", s.Lang},
		{"subject", s.Subject}, {"fallback_template", s.FallbackTemplate}, {"purpose", s.Purpose}, {"ref", s.Ref}, {"identity", s.Identity}, {"to", s.To}} {
		if !utf8.ValidString(f.v) {
			return p, &store.InvalidError{Field: f.name, Msg: fmt.Sprintf("is not valid UTF-8 (at byte %d)", InvalidUTF8At([]byte(f.v)))}
		}
	}
	for i, v := range s.Params {
		if !utf8.ValidString(v) {
			return p, &store.InvalidError{Field: "params", Msg: fmt.Sprintf("parameter %d is not valid UTF-8 (at byte %d)", i+1, InvalidUTF8At([]byte(v)))}
		}
	}
	if s.To == "" {
		return p, &store.InvalidError{Field: "to", Msg: "is required"}
	}
	// The identity decides the default channel. A name that is not
	// configured would wait in the queue forever, claimed by no drain.
	id := d.Identities[p.Identity]
	if id == nil && d.Identities != nil && p.Identity != "" {
		return p, identities.Unknown(p.Identity, d.Identities)
	}
	switch {
	case p.Channel == "" && id != nil:
		p.Channel = id.Channels[0]
	case p.Channel == "":
		p.Channel = store.ChannelWhatsApp
	case id != nil && recipient.Known(p.Channel) && !id.SendsOn(p.Channel):
		return p, &store.InvalidError{Field: "channel", Msg: fmt.Sprintf("identity %s (provider %s) does not send on %s (it sends on %s)",
			p.Identity, id.Config.Provider, p.Channel, strings.Join(id.Channels, ", "))}
	}
	// The address is read as its channel's kind (a number for whatsapp and
	// sms), once the channel is known. A channel msgq has no addresses for
	// is the store's to refuse; its number is read as a number meanwhile.
	channel := p.Channel
	if !recipient.Known(channel) {
		channel = recipient.WhatsApp
	}
	to, err := recipient.Normalize(channel, s.To, pick(s.Region, d.Region))
	if err != nil {
		return p, err
	}
	p.To = to
	if err := checkSegments(p.Channel, s.Text, id); err != nil {
		return p, err
	}
	if err := s.email(&p, id, d); err != nil {
		return p, err
	}
	if s.NotBefore != "" {
		if t, err := time.Parse(time.RFC3339, s.NotBefore); err == nil {
			p.NotBefore = t
		} else if d, err := duration.Parse(s.NotBefore); err == nil {
			p.NotBeforeIn = d
		} else {
			return p, &store.InvalidError{Field: "not_before", Msg: fmt.Sprintf("%q is neither an RFC 3339 time nor a duration like 10m", s.NotBefore)}
		}
	}
	switch {
	case s.ExpiresIn != "" && s.ExpiresAt != "":
		return p, &store.InvalidError{Field: "expires_in", Msg: "give expires_in or expires_at, not both"}
	case s.ExpiresIn != "":
		d, err := duration.Parse(s.ExpiresIn)
		if err != nil {
			return p, &store.InvalidError{Field: "expires_in", Msg: fmt.Sprintf("%q is not a duration like 90s, 15m, 24h or 2d", s.ExpiresIn)}
		}
		if d <= 0 {
			return p, &store.InvalidError{Field: "expires_in", Msg: fmt.Sprintf("%s puts the expiry in the past", s.ExpiresIn)}
		}
		p.ExpiresIn = d
	case s.ExpiresAt != "":
		t, err := time.Parse(time.RFC3339, s.ExpiresAt)
		if err != nil {
			return p, &store.InvalidError{Field: "expires_at", Msg: fmt.Sprintf("%q is not an RFC 3339 time like 2026-12-01T09:00:00Z", s.ExpiresAt)}
		}
		p.ExpiresAt = t
	}
	p.Normalize()
	if err := p.Validate(now); err != nil {
		return p, err
	}
	return p, quietSchedule(&p, pick(s.QuietHours, d.QuietHours), id, now)
}

// checkSegments refuses an SMS text over its identity's max_segments: a
// long text is billed once per segment, and the count is known before
// anything is written.
func checkSegments(channel, text string, id *identities.Identity) error {
	if channel != store.ChannelSMS || text == "" || id == nil || id.Config.MaxSegments <= 0 {
		return nil
	}
	n, enc := sms.Segments(text)
	if n <= id.Config.MaxSegments {
		return nil
	}
	return &store.InvalidError{Field: "text", Msg: fmt.Sprintf("is %d SMS segments (%s, %d characters); identity %s allows at most %d (max_segments)",
		n, enc, utf8.RuneCountInString(text), id.Name, id.Config.MaxSegments)}
}

// email settles an email's content, once p's channel is known: a text
// needs a subject; a template is rendered now, from the identity's
// templates directory, into the subject, text and HTML that are stored
// and sent (internal/provider/smtp sends content, never a template name).
// Rendering at enqueue makes a missing template or parameter bad input
// (exit 2, nothing written) instead of a row failing later in the drain;
// the row keeps the content as it was sent. Another channel takes no
// subject.
func (s *Spec) email(p *store.EnqueueParams, id *identities.Identity, d Defaults) error {
	pl := &p.Payload
	if p.Channel != recipient.Email {
		if s.Subject != "" {
			return &store.InvalidError{Field: "subject", Msg: fmt.Sprintf("is for email only (channel %s has no subject)", p.Channel)}
		}
		return nil
	}
	switch {
	case pl.FallbackTemplate != "" || len(pl.FallbackParams) > 0:
		return &store.InvalidError{Field: "fallback_template", Msg: "has no use on email (there is no customer-service window)"}
	case strings.ContainsAny(s.Subject, "\r\n"):
		return &store.InvalidError{Field: "subject", Msg: "must be one line"}
	case pl.Template != "" && s.Subject != "":
		return &store.InvalidError{Field: "subject", Msg: fmt.Sprintf("cannot be combined with a template: email template %s has its own", pl.Template)}
	case pl.Template == "" && strings.TrimSpace(s.Subject) == "":
		return &store.InvalidError{Field: "subject", Msg: "is required for an email with text (--subject)"}
	case pl.Template == "":
		pl.Subject = s.Subject
		return nil
	}
	dir := ""
	if mt, ok := id.MailTemplater(); ok {
		dir = mt.MailTemplates()
	}
	if dir == "" {
		return &store.InvalidError{Field: "template", Msg: fmt.Sprintf("identity %s has no email templates directory (its templates: setting) to render %s from", p.Identity, pl.Template)}
	}
	set := d.Templates[dir]
	if set == nil {
		var err error
		if set, err = mailtemplate.Load(dir); err != nil {
			return &store.InvalidError{Field: "template", Msg: oneLine(err.Error())}
		}
		if d.Templates != nil {
			d.Templates[dir] = set
		}
	}
	subject, text, html, err := set.Render(pl.Template, pl.Lang, pl.Params)
	if err != nil {
		return &store.InvalidError{Field: "template", Msg: oneLine(err.Error())}
	}
	*pl = store.Payload{Subject: subject, Text: text, HTML: html}
	return nil
}

// quietSchedule applies quiet hours at enqueue: a send that would be due
// inside its recipient's quiet window is scheduled for the window's end,
// so that no drain claims it meanwhile. override is the send's own
// setting ("" for its identity's, quiet.Off, or a window); it is kept
// with the row, for the drain's last check before the call and for
// retries. The time is this host's clock: the drain checks again on the
// store's clock as it knows it, so a small offset cannot send a row in
// the window. A send whose deadline comes before the window ends could
// never go out: it is refused, naming the way out. The decision is
// quiet.Policy.Schedule's.
func quietSchedule(p *store.EnqueueParams, override string, id *identities.Identity, now time.Time) error {
	var pol quiet.Policy
	if id != nil {
		pol = id.Quiet
	}
	row := quiet.Row{To: p.To, Channel: p.Channel, Lane: p.Lane, Purpose: p.Purpose, Override: override}
	// Schedule checks the override first (quiet.CheckOverride).
	until, held, err := pol.Schedule(row, now, p.NotBefore, p.NotBeforeIn, p.ExpiresAt, p.ExpiresIn)
	if err != nil {
		return &store.InvalidError{Field: "quiet_hours", Msg: err.Error()}
	}
	p.Payload.QuietHours = override
	if held {
		p.NotBefore, p.NotBeforeIn = until, 0
	}
	return nil
}

// FieldOf is the input field an admission error names: an
// *store.InvalidError's, "to" for an address that cannot be read ("" when
// it names none).
func FieldOf(err error) string {
	var ie *store.InvalidError
	var pe *phone.Error
	var re *recipient.Error
	switch {
	case errors.As(err, &ie):
		return ie.Field
	case errors.As(err, &pe), errors.As(err, &re):
		return "to"
	}
	return ""
}

// InvalidUTF8At is the 1-based offset of the first byte of b that is not
// valid UTF-8 (0: none).
func InvalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i + 1
		}
		i += size
	}
	return 0
}

// oneLine keeps an error to one line, as the output contract promises.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
