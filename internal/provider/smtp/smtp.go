// Package smtp sends email through an SMTP submission server (a relay such
// as a provider's smtp.example.com:587, or a local MTA) and classifies
// every outcome into a retry class.
//
// SMTP has no idempotency key, so Idempotent() is false: a call whose
// outcome is unknown is never repeated blindly. What the package must get
// right is which failures prove that nothing was queued. An SMTP server
// takes responsibility for a message only when it answers 2xx to the
// final "." of DATA, so:
//
//	connect, greeting, EHLO, STARTTLS, TLS      transient (nothing queued)
//	  (refused, reset, timeout, certificate
//	  not verified, STARTTLS not offered)
//	a 4xx reply at any step                     transient
//	530, 534, 535, 538 at any step              identity (our credentials or auth setup)
//	a 5xx reply before MAIL FROM, or to it      identity (the server refuses us or our sender,
//	                                                      not this message: every row would fail)
//	a 5xx reply to RCPT TO, DATA or the "."     permanent (e.g. 550 5.1.1 no such user)
//	the connection lost before the "." was      transient (the server cannot queue a message
//	  written (any step up to writing the body)             it never saw the end of)
//	no reply to the "." (lost, timed out,       ambiguous (the server may have queued it)
//	  cancelled, unreadable)
//	2xx to the "."                              accepted
//
// Result.Code is the reply code ("550"), Result.Subcode the enhanced status
// code when the reply has one ("5.1.1", RFC 3463), RawError the reply
// verbatim followed by the step it answered ("[msgq: at RCPT TO]").
// ProviderID of an accepted message is its Message-ID without the angle
// brackets: msgq.<message id>@<From's domain>, so a duplicate (or a bounce
// quoting it) names the msgq row it came from.
//
// One call is one connection: dial, EHLO, STARTTLS, AUTH, MAIL, RCPT,
// DATA, QUIT. The transaction runs on go-mail's smtp client (a maintained
// fork of net/smtp with SMTPUTF8, 8BITMIME and SCRAM) rather than go-mail's
// high-level Client.Send, because that hides the reply behind its
// SendError (no reply code and text, no unwrap) and cannot tell a reply
// to the "." from a lost connection: exactly the line between transient
// and ambiguous above. The message itself is built by go-mail's Msg
// (message.go).
package smtp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/textproto"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	gosmtp "github.com/wneessen/go-mail/smtp"
	"golang.org/x/net/idna"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/retry"
)

// The TLS modes of Config.TLS.
const (
	// TLSStartTLS upgrades a plain connection with STARTTLS and refuses to
	// go on without it (the default; submission port 587).
	TLSStartTLS = "starttls"
	// TLSImplicit speaks TLS from the first byte (port 465).
	TLSImplicit = "implicit"
	// TLSNone sends in the clear: for tests and a local MTA only. AUTH
	// PLAIN and LOGIN are still refused over it unless the host is
	// localhost (go-mail's smtp client enforces that).
	TLSNone = "none"
)

// Config is one sending identity on an SMTP server.
type Config struct {
	Host string
	// Port: 0 means 587 for starttls, 465 for implicit, 25 for none.
	Port     int
	Username string // empty: no AUTH
	Password string
	// From is the sender, an RFC 5322 address with an optional display
	// name: "Shop <orders@example.com>". It is also the envelope sender,
	// and its domain names the Message-IDs.
	From string
	// TLS is TLSStartTLS (the default when empty), TLSImplicit or TLSNone.
	TLS string
	// CAFile is a PEM bundle of the CAs that sign the server's certificate
	// (a private CA); empty means the system's roots. Certificates are
	// always verified, against Host.
	CAFile string
	// HELO is the name given in EHLO; empty means this machine's host name.
	HELO string
	// Timeout bounds one call, connection to QUIT; 0 means
	// provider.DefaultTimeout. The call also honours its context.
	Timeout time.Duration
	// Now stamps the Date header; nil means time.Now.
	Now func() time.Time
}

// String prints c with the password redacted.
func (c Config) String() string {
	return fmt.Sprintf("smtp.Config{Host:%q Port:%d Username:%q Password:%s From:%q TLS:%q CAFile:%q}",
		c.Host, c.Port, c.Username, redact(c.Password), c.From, c.TLS, c.CAFile)
}

// GoString is String, so %#v does not print the password either.
func (c Config) GoString() string { return c.String() }

// LogValue keeps the password out of slog output.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(slog.String("host", c.Host), slog.Int("port", c.Port),
		slog.String("username", c.Username), slog.String("password", redact(c.Password)),
		slog.String("from", c.From), slog.String("tls", c.TLS))
}

func redact(secret string) string {
	if secret == "" {
		return "(none)"
	}
	return "[redacted]"
}

// Client sends for one identity. It is safe for concurrent use: every call
// has its own connection and its own smtp client.
type Client struct {
	cfg        Config
	addr       string // host:port
	from       *mail.Address
	fromDomain string // A-label, lower case: the Message-IDs' right-hand side
	tls        *tls.Config
	helo       string
	timeout    time.Duration
	now        func() time.Time
}

var _ provider.Provider = (*Client)(nil)

// New checks cfg and returns a client for it. Every problem is reported
// in one error, each naming the setting.
func New(cfg Config) (*Client, error) {
	var errs []error
	c := &Client{cfg: cfg, timeout: cfg.Timeout, now: cfg.Now, helo: cfg.HELO}
	if c.now == nil {
		c.now = time.Now
	}
	if c.timeout == 0 {
		c.timeout = provider.DefaultTimeout
	}
	if c.timeout < 0 {
		errs = append(errs, fmt.Errorf("smtp timeout must not be negative (got %v)", cfg.Timeout))
	}
	if cfg.TLS == "" {
		c.cfg.TLS = TLSStartTLS
	}
	port := cfg.Port
	switch c.cfg.TLS {
	case TLSStartTLS:
		port = cmpOr(port, 587)
	case TLSImplicit:
		port = cmpOr(port, 465)
	case TLSNone:
		port = cmpOr(port, 25)
	default:
		errs = append(errs, fmt.Errorf("smtp tls must be starttls, implicit or none (got %q)", cfg.TLS))
	}
	if port < 1 || port > 65535 {
		errs = append(errs, fmt.Errorf("smtp port must be between 1 and 65535 (got %d)", cfg.Port))
	}
	host := strings.TrimSpace(cfg.Host)
	if host == "" || strings.ContainsAny(host, " /\r\n") {
		errs = append(errs, fmt.Errorf("smtp host must be a host name or IP address (got %q)", cfg.Host))
	}
	c.addr = net.JoinHostPort(host, strconv.Itoa(port))
	if cfg.Username == "" && cfg.Password != "" {
		errs = append(errs, errors.New("smtp password is set without a username"))
	}
	if cfg.Username != "" && cfg.Password == "" {
		errs = append(errs, errors.New("smtp username is set without a password"))
	}
	if err := c.parseFrom(cfg.From); err != nil {
		errs = append(errs, err)
	}
	if c.helo == "" {
		c.helo = "localhost"
		if h, err := os.Hostname(); err == nil && h != "" {
			c.helo = h
		}
	}
	if strings.ContainsAny(c.helo, " \r\n") {
		errs = append(errs, fmt.Errorf("smtp helo must be one host name (got %q)", cfg.HELO))
	}
	c.tls = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("smtp ca_file: %w", err))
		} else {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("smtp ca_file %s holds no PEM certificate", cfg.CAFile))
			}
			c.tls.RootCAs = pool
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// parseFrom reads the sender and the domain its Message-IDs use.
func (c *Client) parseFrom(from string) error {
	if strings.ContainsAny(from, "\r\n") {
		return errors.New("smtp from contains a line break")
	}
	a, err := mail.ParseAddress(from)
	if err != nil {
		return fmt.Errorf("smtp from %q: %s (want e.g. \"Shop <orders@example.com>\")", from,
			strings.TrimPrefix(err.Error(), "mail: "))
	}
	_, domain, ok := strings.Cut(a.Address, "@")
	if !ok || domain == "" {
		return fmt.Errorf("smtp from %q has no domain", from)
	}
	ascii, err := idna.Lookup.ToASCII(domain)
	if err != nil {
		return fmt.Errorf("smtp from %q: the domain is not a valid host name", from)
	}
	c.from, c.fromDomain = a, strings.ToLower(ascii)
	return nil
}

// String prints the client's config with the password redacted.
func (c *Client) String() string { return c.cfg.String() }

// Idempotent is false: SMTP has no key a server deduplicates by.
func (c *Client) Idempotent() bool { return false }

// Send makes one SMTP transaction for m. See the package comment for the
// classification.
func (c *Client) Send(ctx context.Context, m *provider.Message) provider.Result {
	raw, msgID, res, ok := c.build(m)
	if !ok {
		return res
	}
	if err := ctx.Err(); err != nil {
		return provider.Result{Class: retry.Transient, RawError: "msgq: not sent: " + err.Error()}
	}
	res = c.transact(ctx, m.To, raw)
	if res.Class == retry.Accepted {
		res.ProviderID = msgID
	}
	return res
}

// The steps of a transaction, named in RawError.
const (
	stepConnect  = "connect"
	stepGreeting = "greeting"
	stepEHLO     = "EHLO"
	stepSTARTTLS = "STARTTLS"
	stepAUTH     = "AUTH"
	stepMAIL     = "MAIL FROM"
	stepRCPT     = "RCPT TO"
	stepDATA     = "DATA"
	stepBody     = "writing the message"
	stepDot      = "end of DATA"
)

// transact runs one transaction on a connection of its own.
func (c *Client) transact(ctx context.Context, to string, raw []byte) provider.Result {
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", c.addr)
	if err != nil {
		return transport(stepConnect, err)
	}
	defer conn.Close()
	// One deadline for the whole call, and a cancelled ctx (a drain shutting
	// down) closes the connection at once: every blocked read or write
	// returns, and the step it interrupts decides the class.
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	defer stop()

	var sc net.Conn = conn
	if c.cfg.TLS == TLSImplicit {
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(dctx); err != nil {
			return transport(stepConnect, err)
		}
		sc = tc
	}
	cl, err := gosmtp.NewClient(sc, c.cfg.Host)
	if err != nil {
		return c.session(stepGreeting, err)
	}
	if err := cl.Hello(c.helo); err != nil {
		return c.session(stepEHLO, err)
	}
	if c.cfg.TLS == TLSStartTLS {
		if ok, _ := cl.Extension("STARTTLS"); !ok {
			// A server (or a man in the middle) that does not offer TLS:
			// we never send in the clear what the config says must be
			// encrypted. Nothing was queued.
			return provider.Result{Class: retry.Transient, RawError: "msgq: the server does not offer STARTTLS, which smtp tls starttls requires [msgq: at EHLO]"}
		}
		if err := cl.StartTLS(c.tls); err != nil {
			return c.session(stepSTARTTLS, err)
		}
	}
	if c.cfg.Username != "" {
		if res, ok := c.auth(cl); !ok {
			return res
		}
	}
	// Envelope paths in angle brackets (RFC 5321 4.1.2), the local part
	// quoted where it needs to be: net/mail's Address.String does both.
	if err := cl.Mail(envelope(c.from.Address)); err != nil {
		return c.session(stepMAIL, err)
	}
	if err := cl.Rcpt(envelope(to)); err != nil {
		return message(stepRCPT, err)
	}
	w, err := cl.Data()
	if err != nil {
		return message(stepDATA, err)
	}
	if _, err := w.Write(raw); err != nil {
		// The dot-writer never got to the final "." : the server holds an
		// unfinished message it must discard.
		return transport(stepBody, err)
	}
	if err := w.Close(); err != nil {
		var te *textproto.Error
		if errors.As(err, &te) && is2xx(te.Code) {
			// A 2xx other than 250 (textproto wanted exactly 250).
			_ = cl.Quit()
			return provider.Result{Class: retry.Accepted}
		}
		if errors.As(err, &te) {
			return message(stepDot, err)
		}
		// The "." may have reached the server and the message been
		// queued; only its answer is missing.
		return provider.Result{Class: retry.Ambiguous, RawError: err.Error() + " [msgq: no reply at " + stepDot + "]"}
	}
	// Delivered: a failing QUIT changes nothing.
	_ = cl.Quit()
	return provider.Result{Class: retry.Accepted}
}

func envelope(addr string) string { return (&mail.Address{Address: addr}).String() }

// auth logs in with the strongest mechanism both sides know. Plain-text
// mechanisms only go over TLS (or to localhost): go-mail's PLAIN and LOGIN
// refuse otherwise, and that refusal is an identity problem.
func (c *Client) auth(cl *gosmtp.Client) (provider.Result, bool) {
	ok, list := cl.Extension("AUTH")
	if !ok {
		return provider.Result{Class: retry.Identity, RawError: "msgq: the server offers no AUTH, and the identity has a username [msgq: at EHLO]"}, false
	}
	offered := strings.Fields(strings.ToUpper(list))
	var a gosmtp.Auth
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN", "LOGIN"} {
		if !slices.Contains(offered, mech) {
			continue
		}
		switch mech {
		case "SCRAM-SHA-256":
			a = gosmtp.ScramSHA256Auth(c.cfg.Username, c.cfg.Password)
		case "SCRAM-SHA-1":
			a = gosmtp.ScramSHA1Auth(c.cfg.Username, c.cfg.Password)
		case "PLAIN":
			a = gosmtp.PlainAuth("", c.cfg.Username, c.cfg.Password, c.cfg.Host, false)
		case "LOGIN":
			a = gosmtp.LoginAuth(c.cfg.Username, c.cfg.Password, c.cfg.Host, false)
		}
		break
	}
	if a == nil {
		return provider.Result{Class: retry.Identity, RawError: fmt.Sprintf(
			"msgq: the server offers AUTH %s and msgq speaks SCRAM-SHA-256, SCRAM-SHA-1, PLAIN and LOGIN [msgq: at EHLO]", list)}, false
	}
	if err := cl.Auth(a); err != nil {
		var te *textproto.Error
		if errors.As(err, &te) {
			return c.session(stepAUTH, err), false
		}
		if isNetwork(err) {
			return transport(stepAUTH, err), false
		}
		// Refused before anything was sent: e.g. PLAIN over a
		// connection without TLS.
		return provider.Result{Class: retry.Identity, RawError: err.Error() + " [msgq: at " + stepAUTH + "]"}, false
	}
	return provider.Result{}, true
}
