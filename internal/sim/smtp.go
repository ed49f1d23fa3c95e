package sim

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// The SMTP side of the simulator: a real SMTP server (emersion/go-smtp) on
// an address of its own that plays a mail relay. Each mail it accepts is
// appended to the Sim's delivery log once per recipient, with API "smtp",
// Channel "email", ID the mail's Message-ID (without angle brackets), Ref
// the msgq message id in it (Message-ID <msgq.{id}@domain>, as
// internal/provider/smtp writes them; "" for any other), To the envelope
// recipient and Subject the decoded Subject header.
//
// # Faults
//
// By the recipient's local part, whatever the probabilities (so a test
// chooses the outcome by the address it sends to):
//
//	bounce+...@    550 5.1.1 at RCPT TO                 nothing delivered
//	defer+...@     451 4.7.1 at RCPT TO (greylisting)   nothing delivered
//	reject+...@    554 5.7.1 after the final "."        nothing delivered
//	tempfail+...@  451 4.3.0 after the final "."        nothing delivered
//	drop+...@      delivered, then the connection is closed without a reply to the "."
//
// Otherwise, with SMTPConfig's probabilities, each mail's final "." takes
// one draw from the Sim's seeded random source (shared with the HTTP APIs,
// so one seed and one sequence of calls give one sequence of outcomes),
// tested in the order 4xx, 5xx, drop: 4xx and 5xx answer as tempfail and
// reject do, drop as drop does. With Username set, AUTH PLAIN is required
// before MAIL FROM (530 5.7.0 without it) and wrong credentials get
// 535 5.7.8.
//
// The Sim's Latency delays each mail's decision after its final ".";
// a client that hangs up during it gets nothing delivered or logged.
//
// The call log (GET /calls) gets one entry per recipient decided, with
// Result "delivered" or the fault: "fault-smtp-bounce", "fault-smtp-defer",
// "fault-smtp-4xx", "fault-smtp-5xx" (the drop fault keeps "delivered":
// the mail was accepted, its answer lost).

// SMTPConfig is how the simulator's SMTP server behaves.
type SMTPConfig struct {
	// Fault probabilities at the final ".", each in [0,1], together at most 1.
	Fault4xx  float64 // 451 4.3.0: nothing delivered
	Fault5xx  float64 // 554 5.7.1: nothing delivered
	FaultDrop float64 // delivered, then the connection closed without a reply

	// Username and Password, when Username is set, are the one login AUTH
	// PLAIN accepts; without them the server offers no AUTH.
	Username, Password string
	// TLS, when set, is offered by STARTTLS. Without it the server speaks
	// plain SMTP only (and AUTH is allowed over it: it is a test server).
	TLS *tls.Config
	// Domain names the server in its greeting; default "sim.msgq.test".
	Domain string
}

// smtpFaultNames are the probabilities as `msgq sim serve` flags name them.
var smtpFaultNames = [3]string{"smtp-fault-4xx", "smtp-fault-5xx", "smtp-fault-drop"}

func (c *SMTPConfig) probabilities() [3]float64 {
	return [3]float64{c.Fault4xx, c.Fault5xx, c.FaultDrop}
}

// Validate reports every problem with c at once.
func (c SMTPConfig) Validate() error {
	var errs []error
	sum, ok := 0.0, true
	for i, p := range c.probabilities() {
		if !(p >= 0 && p <= 1) { // NaN too
			errs = append(errs, fmt.Errorf("%s must be a probability between 0 and 1 (got %v)", smtpFaultNames[i], p))
			ok = false
			continue
		}
		sum += p
	}
	if ok && sum > 1+1e-9 {
		errs = append(errs, fmt.Errorf("smtp fault probabilities add up to %v; at most 1", sum))
	}
	if c.Username == "" && c.Password != "" {
		errs = append(errs, errors.New("smtp password set without a username"))
	}
	return errors.Join(errs...)
}

// Mail is one mail the SMTP server accepted, as received.
type Mail struct {
	From string    `json:"from"` // the envelope sender
	To   []string  `json:"to"`   // the envelope recipients
	At   time.Time `json:"at"`
	Raw  []byte    `json:"raw"` // the message as received, CRLF line ends
}

// SMTPServer is the simulator's SMTP server. Close it when done.
type SMTPServer struct {
	s   *Sim
	cfg SMTPConfig
	cum [3]float64
	srv *smtp.Server

	mu    sync.Mutex
	mails []Mail
	ln    net.Listener
}

// NewSMTPServer returns the SMTP side of s, not yet listening.
func (s *Sim) NewSMTPServer(cfg SMTPConfig) (*SMTPServer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Domain == "" {
		cfg.Domain = "sim.msgq.test"
	}
	m := &SMTPServer{s: s, cfg: cfg}
	sum := 0.0
	for i, p := range cfg.probabilities() {
		sum += p
		m.cum[i] = sum
	}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &smtpSession{m: m, conn: c}, nil
	}))
	srv.Domain = cfg.Domain
	srv.TLSConfig = cfg.TLS
	srv.AllowInsecureAuth = true
	srv.MaxMessageBytes = 10 << 20
	srv.MaxRecipients = 100
	srv.ReadTimeout = time.Minute
	srv.WriteTimeout = time.Minute
	srv.ErrorLog = smtpLog{s.cfg.Log}
	m.srv = srv
	return m, nil
}

// smtpLog sends go-smtp's connection errors (a client gone mid-session, a
// dropped connection of our own) to the Sim's logger at debug level.
type smtpLog struct{ l *slog.Logger }

func (l smtpLog) Printf(format string, v ...any) {
	if l.l != nil {
		l.l.Debug("sim smtp: " + fmt.Sprintf(format, v...))
	}
}

func (l smtpLog) Println(v ...any) {
	if l.l != nil {
		l.l.Debug("sim smtp: " + strings.TrimSpace(fmt.Sprintln(v...)))
	}
}

// Listen listens on addr (host:port; port 0 picks one) and serves in the
// background. It returns the address listened on.
func (m *SMTPServer) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.ln = ln
	m.mu.Unlock()
	go func() { _ = m.srv.Serve(ln) }()
	return ln.Addr(), nil
}

// Serve serves on ln until Close.
func (m *SMTPServer) Serve(ln net.Listener) error { return m.srv.Serve(ln) }

// Close stops listening and closes every connection.
func (m *SMTPServer) Close() error { return m.srv.Close() }

// Mails returns a copy of the mails accepted, in order.
func (m *SMTPServer) Mails() []Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.mails)
	for i := range out {
		out[i].To = slices.Clone(out[i].To)
		out[i].Raw = slices.Clone(out[i].Raw)
	}
	return out
}

// smtpFault is one mail's fate at the final ".".
type smtpFault uint8

const (
	smtpFault4xx smtpFault = iota
	smtpFault5xx
	smtpFaultDrop
	smtpFaultNone
)

// pick draws the fault of one mail from the Sim's source. s.mu must be held.
func (m *SMTPServer) pickLocked() smtpFault {
	if m.cum[2] == 0 {
		return smtpFaultNone
	}
	r := m.s.rng.Float64()
	for i, c := range m.cum {
		if r < c {
			return smtpFault(i)
		}
	}
	return smtpFaultNone
}

// ruleOf is the fault a recipient's local part asks for ("" none).
func ruleOf(rcpt string) string {
	local, _, _ := strings.Cut(rcpt, "@")
	tag, _, ok := strings.Cut(strings.ToLower(local), "+")
	if !ok {
		return ""
	}
	switch tag {
	case "bounce", "defer", "reject", "tempfail", "drop":
		return tag
	}
	return ""
}

var (
	errAuthRequired = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	errBounce       = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user here"}
	errDefer        = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 7, 1}, Message: "Greylisted, try again later"}
	errReject       = &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Message rejected by policy"}
	errHungUp       = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 4, 2}, Message: "Connection dropped during the latency"}
	errTempfail     = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary local problem, try again later"}
)

type smtpSession struct {
	m      *SMTPServer
	conn   *smtp.Conn
	authed bool
	from   string
	rcpts  []string
}

var _ smtp.AuthSession = (*smtpSession)(nil)

func (ss *smtpSession) AuthMechanisms() []string {
	if ss.m.cfg.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *smtpSession) Auth(mech string) (sasl.Server, error) {
	if ss.m.cfg.Username == "" || mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, username, password string) error {
		if username != ss.m.cfg.Username || password != ss.m.cfg.Password {
			return smtp.ErrAuthFailed // 535 5.7.8
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if ss.m.cfg.Username != "" && !ss.authed {
		return errAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	switch ruleOf(to) {
	case "bounce":
		ss.m.call(to, "", "fault-smtp-bounce")
		return errBounce
	case "defer":
		ss.m.call(to, "", "fault-smtp-defer")
		return errDefer
	}
	ss.rcpts = append(ss.rcpts, to)
	return nil
}

func (ss *smtpSession) Reset() { ss.from, ss.rcpts = "", nil }

func (ss *smtpSession) Logout() error { return nil }

// Data reads the whole mail, then decides its fate under the Sim's lock:
// a refusal records nothing delivered; otherwise every recipient gets a
// delivery, and a drop then closes the connection before go-smtp can
// write the reply.
func (ss *smtpSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	msgID, ref, subject := parseMail(raw)
	m, s := ss.m, ss.m.s
	if !ss.waitLatency(s.cfg.Latency) {
		// The client hung up during the latency: nothing is decided,
		// as the HTTP APIs do with a caller that hangs up.
		return errHungUp
	}

	s.mu.Lock()
	f := m.pickLocked()
	// A recipient rule overrides the draw (the draw is still taken, so the
	// sequence of outcomes does not depend on which addresses were used).
	for _, rc := range ss.rcpts {
		switch ruleOf(rc) {
		case "reject":
			f = smtpFault5xx
		case "tempfail":
			f = smtpFault4xx
		case "drop":
			if f == smtpFaultNone {
				f = smtpFaultDrop
			}
		}
	}
	now := s.now().UTC()
	res := "delivered"
	switch f {
	case smtpFault4xx:
		res = "fault-smtp-4xx"
	case smtpFault5xx:
		res = "fault-smtp-5xx"
	}
	for _, rc := range ss.rcpts {
		s.calls = append(s.calls, Call{Ref: ref, To: rc, At: now, API: APISMTP, Result: res})
		if res == "delivered" {
			s.deliveries = append(s.deliveries, Delivery{Ref: ref, To: rc, At: now, ID: msgID, API: APISMTP,
				Channel: "email", Subject: subject})
		}
	}
	s.mu.Unlock()

	switch f {
	case smtpFault4xx:
		return errTempfail
	case smtpFault5xx:
		return errReject
	}
	m.mu.Lock()
	m.mails = append(m.mails, Mail{From: ss.from, To: slices.Clone(ss.rcpts), At: now, Raw: raw})
	m.mu.Unlock()
	if f == smtpFaultDrop {
		// The mail is queued; its answer is lost.
		_ = ss.conn.Conn().Close()
	}
	return nil
}

// waitLatency waits out the Sim's latency after a mail's final ".",
// watching the connection meanwhile: it is false when the client hung
// up (or sent anything before its answer) during the wait.
func (ss *smtpSession) waitLatency(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	c := ss.conn.Conn()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return false
	}
	var b [1]byte
	_, err := c.Read(b[:])
	_ = c.SetReadDeadline(time.Time{})
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// call logs a decision made at RCPT TO.
func (m *SMTPServer) call(to, ref, result string) {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Ref: ref, To: to, At: s.now().UTC(), API: APISMTP, Result: result})
}

// parseMail reads the Message-ID (without angle brackets), the msgq id in
// it and the decoded Subject. A mail net/mail cannot read is still
// accepted, as a real relay would: the fields are then "".
func parseMail(raw []byte) (msgID, ref, subject string) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return "", "", ""
	}
	msgID = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(msg.Header.Get("Message-Id")), "<"), ">")
	if rest, ok := strings.CutPrefix(msgID, "msgq."); ok {
		ref, _, _ = strings.Cut(rest, "@")
	}
	subject = msg.Header.Get("Subject")
	if d, err := new(mime.WordDecoder).DecodeHeader(subject); err == nil {
		subject = d
	}
	return msgID, ref, subject
}

// String names the server's address, e.g. for a log line.
func (m *SMTPServer) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ln == nil {
		return "sim smtp (not listening)"
	}
	return "smtp://" + m.ln.Addr().String()
}
