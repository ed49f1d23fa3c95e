package smtp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/smtp"
	"github.com/msgq/msgq/internal/retry"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
)

// parts reads a received mail: its header and, by content type, each
// part's decoded body (a single-part mail gives one entry).
func parts(t *testing.T, raw []byte) (*mail.Message, map[string]string) {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("net/mail cannot read the message: %v\n%s", err, raw)
	}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("Content-Type %q: %v", m.Header.Get("Content-Type"), err)
	}
	out := map[string]string{}
	if !strings.HasPrefix(mt, "multipart/") {
		b, err := io.ReadAll(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		out[mt] = string(b) // encoding checked by the caller
		return m, out
	}
	if mt != "multipart/alternative" {
		t.Fatalf("Content-Type is %s, want multipart/alternative", mt)
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := mr.NextPart() // decodes quoted-printable
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pt, pp, err := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.EqualFold(pp["charset"], "utf-8") {
			t.Errorf("part %s has charset %q, want UTF-8", pt, pp["charset"])
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		out[pt] = string(b)
	}
	return m, out
}

func TestAcceptedMailIsAProperRFC5322MessageAndReachesTheSim(t *testing.T) {
	s, srv, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
	c := client(t, host, port, nil)
	m := msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5M", "ada@example.com")
	m.Payload.Subject = "Votre commande Nº 42 est prête ✓"
	m.Payload.Text = "Bonjour Ada,\nvotre commande est prête.\n"
	m.Payload.HTML = "<p>Bonjour <b>Ada</b>, votre commande est prête.</p>"

	res := c.Send(context.Background(), m)
	if res.Class != retry.Accepted {
		t.Fatalf("Send = %+v, want accepted", res)
	}
	wantID := "msgq.01JD6Z5V8Q3N4W7Y2R1T0XKQ5M@example.com"
	if res.ProviderID != wantID || res.Replayed {
		t.Errorf("ProviderID %q Replayed %v, want %q false", res.ProviderID, res.Replayed, wantID)
	}
	if c.Idempotent() {
		t.Error("Idempotent() = true: SMTP has no key")
	}

	d := s.Deliveries()
	if len(d) != 1 {
		t.Fatalf("deliveries = %+v, want 1", d)
	}
	if d[0].API != sim.APISMTP || d[0].Channel != "email" || d[0].Ref != m.ID || d[0].To != "ada@example.com" ||
		d[0].ID != wantID || d[0].Subject != m.Payload.Subject {
		t.Errorf("delivery = %+v", d[0])
	}

	mails := srv.Mails()
	if len(mails) != 1 {
		t.Fatalf("mails = %d, want 1", len(mails))
	}
	if mails[0].From != "orders@example.com" || len(mails[0].To) != 1 || mails[0].To[0] != "ada@example.com" {
		t.Errorf("envelope from %q to %q", mails[0].From, mails[0].To)
	}
	raw := mails[0].Raw
	if !isASCII(raw) {
		t.Errorf("the message is not 7-bit: UTF-8 must be encoded\n%s", raw)
	}
	hdr, body := parts(t, raw)
	h := hdr.Header
	if got := h.Get("Message-Id"); got != "<"+wantID+">" {
		t.Errorf("Message-ID %q, want <%s>", got, wantID)
	}
	if got, err := new(mime.WordDecoder).DecodeHeader(h.Get("Subject")); err != nil || got != m.Payload.Subject {
		t.Errorf("Subject decodes to %q, %v; want %q (raw %q)", got, err, m.Payload.Subject, h.Get("Subject"))
	}
	if !strings.HasPrefix(h.Get("Subject"), "=?UTF-8?") {
		t.Errorf("Subject %q is not RFC 2047 encoded", h.Get("Subject"))
	}
	from, err := mail.ParseAddress(h.Get("From"))
	if err != nil || from.Address != "orders@example.com" || from.Name != "Shop" {
		t.Errorf("From %q -> %v, %v", h.Get("From"), from, err)
	}
	if to, err := h.AddressList("To"); err != nil || len(to) != 1 || to[0].Address != "ada@example.com" {
		t.Errorf("To %q -> %v, %v", h.Get("To"), to, err)
	}
	if date, err := h.Date(); err != nil || !date.Equal(fixedNow) {
		t.Errorf("Date %q -> %v, %v; want %v", h.Get("Date"), date, err, fixedNow)
	}
	if h.Get("Mime-Version") != "1.0" || h.Get("Auto-Submitted") != "auto-generated" {
		t.Errorf("MIME-Version %q Auto-Submitted %q", h.Get("Mime-Version"), h.Get("Auto-Submitted"))
	}
	if got := strings.ReplaceAll(body["text/plain"], "\r\n", "\n"); got != m.Payload.Text {
		t.Errorf("text part %q, want %q", got, m.Payload.Text)
	}
	if got := body["text/html"]; got != m.Payload.HTML {
		t.Errorf("html part %q, want %q", got, m.Payload.HTML)
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func TestTextOnlyMailIsOneTextPart(t *testing.T) {
	_, srv, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
	c := client(t, host, port, nil)
	if res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5N", "ada@example.com")); res.Class != retry.Accepted {
		t.Fatalf("Send = %+v", res)
	}
	m, err := mail.ReadMessage(bytes.NewReader(srv.Mails()[0].Raw))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil || mt != "text/plain" || !strings.EqualFold(params["charset"], "utf-8") {
		t.Errorf("Content-Type %q (%v)", m.Header.Get("Content-Type"), err)
	}
}

// Every outcome the sim's recipient rules give, classified.
func TestRepliesAreClassified(t *testing.T) {
	for _, tc := range []struct {
		to            string
		class         retry.Class
		code, subcode string
		delivered     int
	}{
		{"bounce+1@example.com", retry.Permanent, "550", "5.1.1", 0},
		{"defer+1@example.com", retry.Transient, "451", "4.7.1", 0},
		{"reject+1@example.com", retry.Permanent, "554", "5.7.1", 0},
		{"tempfail+1@example.com", retry.Transient, "451", "4.3.0", 0},
		// The mail was queued, the reply to the "." lost: nobody can
		// tell the drain it went out, and SMTP has no key to retry with.
		{"drop+1@example.com", retry.Ambiguous, "", "", 1},
	} {
		t.Run(tc.to, func(t *testing.T) {
			s, _, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
			res := client(t, host, port, nil).Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5P", tc.to))
			if res.Class != tc.class || res.Code != tc.code || res.Subcode != tc.subcode {
				t.Errorf("Send = %+v, want %s %s %s", res, tc.class, tc.code, tc.subcode)
			}
			if tc.code != "" && !strings.HasPrefix(res.RawError, tc.code+" "+tc.subcode+" ") {
				t.Errorf("RawError %q does not carry the reply verbatim", res.RawError)
			}
			if res.ProviderID != "" {
				t.Errorf("ProviderID %q on a %s result", res.ProviderID, res.Class)
			}
			if n := len(s.Deliveries()); n != tc.delivered {
				t.Errorf("%d deliveries, want %d", n, tc.delivered)
			}
			if len(s.Calls()) != 1 {
				t.Errorf("calls = %+v, want 1", s.Calls())
			}
		})
	}
}

func TestProbabilityFaultsComeFromTheSeededDraw(t *testing.T) {
	for _, tc := range []struct {
		cfg   sim.SMTPConfig
		class retry.Class
		n     int
	}{
		{sim.SMTPConfig{Fault4xx: 1}, retry.Transient, 0},
		{sim.SMTPConfig{Fault5xx: 1}, retry.Permanent, 0},
		{sim.SMTPConfig{FaultDrop: 1}, retry.Ambiguous, 1},
	} {
		s, _, host, port := simSMTP(t, tc.cfg, nil)
		res := client(t, host, port, nil).Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5Q", "ada@example.com"))
		if res.Class != tc.class || len(s.Deliveries()) != tc.n {
			t.Errorf("%+v: Send = %+v, %d deliveries; want %s, %d", tc.cfg, res, len(s.Deliveries()), tc.class, tc.n)
		}
	}
}

func TestAuth(t *testing.T) {
	cfg := sim.SMTPConfig{Username: "shop", Password: "s3cret"}
	t.Run("wrong password is identity 535", func(t *testing.T) {
		s, _, host, port := simSMTP(t, cfg, nil)
		c := client(t, host, port, func(c *smtp.Config) { c.Username, c.Password = "shop", "wrong" })
		res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5R", "ada@example.com"))
		if res.Class != retry.Identity || res.Code != "535" || res.Subcode != "5.7.8" {
			t.Errorf("Send = %+v, want identity 535 5.7.8", res)
		}
		if strings.Contains(res.RawError, "wrong") {
			t.Errorf("RawError %q shows the password", res.RawError)
		}
		if len(s.Deliveries()) != 0 || len(s.Calls()) != 0 {
			t.Errorf("deliveries %v calls %v", s.Deliveries(), s.Calls())
		}
	})
	t.Run("no login where one is required is identity 530", func(t *testing.T) {
		_, _, host, port := simSMTP(t, cfg, nil)
		res := client(t, host, port, nil).Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5S", "ada@example.com"))
		if res.Class != retry.Identity || res.Code != "530" {
			t.Errorf("Send = %+v, want identity 530", res)
		}
	})
	t.Run("right password is accepted", func(t *testing.T) {
		s, _, host, port := simSMTP(t, cfg, nil)
		c := client(t, host, port, func(c *smtp.Config) { c.Username, c.Password = "shop", "s3cret" })
		if res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5T", "ada@example.com")); res.Class != retry.Accepted {
			t.Errorf("Send = %+v", res)
		}
		if len(s.Deliveries()) != 1 {
			t.Errorf("deliveries %v", s.Deliveries())
		}
	})
	t.Run("a server without AUTH is identity", func(t *testing.T) {
		_, _, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
		c := client(t, host, port, func(c *smtp.Config) { c.Username, c.Password = "shop", "s3cret" })
		if res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5V", "ada@example.com")); res.Class != retry.Identity {
			t.Errorf("Send = %+v, want identity", res)
		}
	})
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	res := client(t, "127.0.0.1", port, nil).Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5W", "ada@example.com"))
	if res.Class != retry.Transient || !strings.Contains(res.RawError, "connect") {
		t.Errorf("Send = %+v, want transient at connect", res)
	}
}

func TestTLS(t *testing.T) {
	ca := newTestCA(t)
	t.Run("starttls with a certificate the system does not trust is transient", func(t *testing.T) {
		s, _, host, port := simSMTP(t, sim.SMTPConfig{TLS: ca.serverTLS()}, nil)
		c := client(t, host, port, func(c *smtp.Config) { c.TLS = smtp.TLSStartTLS })
		res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5X", "ada@example.com"))
		if res.Class != retry.Transient || !strings.Contains(res.RawError, "certificate") {
			t.Errorf("Send = %+v, want transient certificate failure", res)
		}
		if len(s.Deliveries()) != 0 || len(s.Calls()) != 0 {
			t.Errorf("something got through: %v %v", s.Deliveries(), s.Calls())
		}
	})
	t.Run("starttls with the CA file is accepted", func(t *testing.T) {
		s, _, host, port := simSMTP(t, sim.SMTPConfig{TLS: ca.serverTLS(), Username: "shop", Password: "pw"}, nil)
		c := client(t, host, port, func(c *smtp.Config) {
			c.TLS, c.CAFile, c.Username, c.Password = smtp.TLSStartTLS, ca.caFile, "shop", "pw"
		})
		if res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5Y", "ada@example.com")); res.Class != retry.Accepted {
			t.Errorf("Send = %+v", res)
		}
		if len(s.Deliveries()) != 1 {
			t.Errorf("deliveries %v", s.Deliveries())
		}
	})
	t.Run("the certificate must name the host", func(t *testing.T) {
		_, _, _, port := simSMTP(t, sim.SMTPConfig{TLS: ca.serverTLS()}, nil)
		c := client(t, "localhost", port, func(c *smtp.Config) { c.TLS, c.CAFile = smtp.TLSStartTLS, ca.caFile })
		if res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ5Z", "ada@example.com")); res.Class != retry.Transient {
			t.Errorf("Send = %+v, want transient (the certificate is for 127.0.0.1 only)", res)
		}
	})
	t.Run("starttls required and not offered sends nothing", func(t *testing.T) {
		s, _, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
		c := client(t, host, port, func(c *smtp.Config) { c.TLS = smtp.TLSStartTLS })
		res := c.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ60", "ada@example.com"))
		if res.Class != retry.Transient || !strings.Contains(res.RawError, "STARTTLS") {
			t.Errorf("Send = %+v", res)
		}
		if len(s.Calls()) != 0 {
			t.Errorf("calls %v", s.Calls())
		}
	})
	t.Run("implicit TLS", func(t *testing.T) {
		s, _, host, port := simSMTP(t, sim.SMTPConfig{}, func(ln net.Listener) net.Listener {
			return tls.NewListener(ln, ca.serverTLS())
		})
		bad := client(t, host, port, func(c *smtp.Config) { c.TLS = smtp.TLSImplicit })
		if res := bad.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ61", "ada@example.com")); res.Class != retry.Transient {
			t.Errorf("without the CA: Send = %+v, want transient", res)
		}
		good := client(t, host, port, func(c *smtp.Config) { c.TLS, c.CAFile = smtp.TLSImplicit, ca.caFile })
		if res := good.Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ62", "ada@example.com")); res.Class != retry.Accepted {
			t.Errorf("with the CA: Send = %+v", res)
		}
		if len(s.Deliveries()) != 1 {
			t.Errorf("deliveries %v", s.Deliveries())
		}
	})
}

// The steps a real server may fail at, scripted byte by byte.
func TestScriptedFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		greeting string
		script   map[string]string
		class    retry.Class
		code     string
	}{
		{"greeting 554 refuses us", "554 5.3.2 no service for you", nil, retry.Identity, "554"},
		{"greeting 421 is busy", "421 4.3.2 try later", nil, retry.Transient, "421"},
		{"closed before the greeting", "close", nil, retry.Transient, ""},
		{"MAIL FROM 553 refuses the sender", "220 hi", map[string]string{"MAIL": "553 5.7.1 sender not allowed"}, retry.Identity, "553"},
		{"MAIL FROM 530 wants a login", "220 hi", map[string]string{"MAIL": "530 5.7.0 authentication required"}, retry.Identity, "530"},
		{"MAIL FROM 452", "220 hi", map[string]string{"MAIL": "452 4.3.1 insufficient storage"}, retry.Transient, "452"},
		{"lost at RCPT TO", "220 hi", map[string]string{"RCPT": "close"}, retry.Transient, ""},
		{"lost at DATA", "220 hi", map[string]string{"DATA": "close"}, retry.Transient, ""},
		{"DATA 554", "220 hi", map[string]string{"DATA": "554 5.5.1 no valid recipients"}, retry.Permanent, "554"},
		{"lost after the final dot", "220 hi", map[string]string{".": "close"}, retry.Ambiguous, ""},
		{"552 after the final dot", "220 hi", map[string]string{".": "552 5.3.4 message too big"}, retry.Permanent, "552"},
		{"a 251 after the final dot is accepted", "220 hi", map[string]string{".": "251 2.1.5 forwarded"}, retry.Accepted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, port, seen := scripted(t, tc.greeting, tc.script)
			res := client(t, host, port, nil).Send(context.Background(), msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ63", "ada@example.com"))
			if res.Class != tc.class || res.Code != tc.code {
				t.Errorf("Send = %+v, want %s %q", res, tc.class, tc.code)
			}
			cmds := <-seen
			if tc.class == retry.Accepted && (len(cmds) == 0 || cmds[len(cmds)-1] != "QUIT") {
				t.Errorf("commands %q: an accepted mail ends with QUIT", cmds)
			}
			if tc.class == retry.Accepted && (cmds[1] != "MAIL FROM:<orders@example.com>" || cmds[2] != "RCPT TO:<ada@example.com>") {
				t.Errorf("commands %q: envelope paths must be in angle brackets (RFC 5321)", cmds)
			}
		})
	}
}

func TestLocalRefusalsMakeNoCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*provider.Message)
	}{
		{"invalid address", func(m *provider.Message) { m.To = "not an address" }},
		{"address not normalised", func(m *provider.Message) { m.To = "ada@EXAMPLE.com" }},
		{"phone number", func(m *provider.Message) { m.To = "+15551234567" }},
		{"no subject", func(m *provider.Message) { m.Payload.Subject = " " }},
		{"line break in the subject", func(m *provider.Message) { m.Payload.Subject = "Hi\r\nBcc: eve@example.com" }},
		{"no text", func(m *provider.Message) { m.Payload.Text = "" }},
		{"unrendered template", func(m *provider.Message) { m.Payload = store.Payload{Template: "order_ready", Lang: "en"} }},
		{"an id that cannot be a Message-ID", func(m *provider.Message) { m.ID = "a b@c" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
			m := msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ64", "ada@example.com")
			tc.edit(m)
			res := client(t, host, port, nil).Send(context.Background(), m)
			if res.Class != retry.Permanent || !strings.HasPrefix(res.RawError, "msgq: ") {
				t.Errorf("Send = %+v, want a local permanent refusal", res)
			}
			if len(s.Calls()) != 0 {
				t.Errorf("calls %v", s.Calls())
			}
		})
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	s, _, host, port := simSMTP(t, sim.SMTPConfig{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := client(t, host, port, nil).Send(ctx, msg("01JD6Z5V8Q3N4W7Y2R1T0XKQ65", "ada@example.com"))
	if res.Class != retry.Transient || len(s.Calls()) != 0 {
		t.Errorf("Send = %+v, calls %v", res, s.Calls())
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	base := smtp.Config{Host: "smtp.example.com", From: "orders@example.com"}
	for _, tc := range []struct {
		edit func(*smtp.Config)
		want string
	}{
		{func(c *smtp.Config) { c.Host = "" }, "smtp host"},
		{func(c *smtp.Config) { c.TLS = "ssl" }, "smtp tls must be starttls, implicit or none"},
		{func(c *smtp.Config) { c.Port = 70000 }, "smtp port"},
		{func(c *smtp.Config) { c.From = "Shop" }, "smtp from"},
		{func(c *smtp.Config) { c.From = "a@b.com\r\nBcc: x@y.com" }, "line break"},
		{func(c *smtp.Config) { c.Username = "u" }, "without a password"},
		{func(c *smtp.Config) { c.Password = "p" }, "without a username"},
		{func(c *smtp.Config) { c.CAFile = "/nonexistent/ca.pem" }, "smtp ca_file"},
		{func(c *smtp.Config) { c.Timeout = -1 }, "timeout"},
	} {
		cfg := base
		tc.edit(&cfg)
		_, err := smtp.New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v) = %v, want an error about %q", cfg, err, tc.want)
		}
	}
	if _, err := smtp.New(base); err != nil {
		t.Errorf("New(%v) = %v", base, err)
	}
}

func TestConfigNeverPrintsThePassword(t *testing.T) {
	cfg := smtp.Config{Host: "smtp.example.com", From: "orders@example.com", Username: "u", Password: "hunter2"}
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("%q shows the password", s)
		}
	}
}
