package sim_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"net/smtp"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/sim"
)

// smtpSim starts a Sim's SMTP server on a free loopback port.
func smtpSim(t *testing.T, cfg sim.Config, scfg sim.SMTPConfig) (*sim.Sim, *sim.SMTPServer, string) {
	t.Helper()
	s := sim.New(cfg)
	t.Cleanup(s.Close)
	srv, err := s.NewSMTPServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if !strings.HasPrefix(srv.String(), "smtp://127.0.0.1:") {
		t.Errorf("String() = %q", srv.String())
	}
	return s, srv, addr.String()
}

const rawMail = "From: Shop <orders@example.com>\r\n" +
	"To: ada@example.com\r\n" +
	"Subject: =?UTF-8?q?Commande_pr=C3=AAte?=\r\n" +
	"Message-ID: <msgq.01JD6Z5V8Q3N4W7Y2R1T0XKQ5M@example.com>\r\n" +
	"\r\n" +
	"It is ready.\r\n"

// sendRaw runs one transaction with net/smtp (a client independent of
// msgq's provider) and returns the error of the step that failed, if any,
// and which step that was.
func sendRaw(addr string, auth smtp.Auth, to ...string) (string, error) {
	c, err := smtp.Dial(addr)
	if err != nil {
		return "dial", err
	}
	defer c.Close()
	if auth != nil {
		if err := c.Auth(auth); err != nil {
			return "auth", err
		}
	}
	if err := c.Mail("orders@example.com"); err != nil {
		return "mail", err
	}
	for _, rc := range to {
		if err := c.Rcpt(rc); err != nil {
			return "rcpt", err
		}
	}
	w, err := c.Data()
	if err != nil {
		return "data", err
	}
	if _, err := w.Write([]byte(rawMail)); err != nil {
		return "write", err
	}
	if err := w.Close(); err != nil {
		return "dot", err
	}
	return "", c.Quit()
}

func code(err error) int {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

func TestSMTPAcceptedMailIsADeliveryPerRecipient(t *testing.T) {
	s, srv, addr := smtpSim(t, cfgWith(nil), sim.SMTPConfig{})
	if step, err := sendRaw(addr, nil, "ada@example.com", "bob@example.com"); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	got := s.Deliveries()
	want := []sim.Delivery{
		{Ref: "01JD6Z5V8Q3N4W7Y2R1T0XKQ5M", To: "ada@example.com", At: fixedNow, ID: "msgq.01JD6Z5V8Q3N4W7Y2R1T0XKQ5M@example.com",
			API: sim.APISMTP, Channel: "email", Subject: "Commande prête"},
		{Ref: "01JD6Z5V8Q3N4W7Y2R1T0XKQ5M", To: "bob@example.com", At: fixedNow, ID: "msgq.01JD6Z5V8Q3N4W7Y2R1T0XKQ5M@example.com",
			API: sim.APISMTP, Channel: "email", Subject: "Commande prête"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("deliveries\n got %+v\nwant %+v", got, want)
	}
	mails := srv.Mails()
	if len(mails) != 1 || mails[0].From != "orders@example.com" || string(mails[0].Raw) != rawMail ||
		!slices.Equal(mails[0].To, []string{"ada@example.com", "bob@example.com"}) {
		t.Errorf("mails = %+v", mails)
	}
	if c := s.Calls(); len(c) != 2 || c[0].Result != "delivered" || c[0].API != sim.APISMTP {
		t.Errorf("calls = %+v", c)
	}

	// GET /deliveries shows the email fields.
	h := httptest.NewServer(s.Handler())
	defer h.Close()
	resp, err := freshClient(0).Get(h.URL + "/deliveries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var log []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&log); err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0]["channel"] != "email" || log[0]["subject"] != "Commande prête" || log[0]["api"] != "smtp" {
		t.Errorf("/deliveries = %v", log)
	}
}

func TestSMTPRecipientRules(t *testing.T) {
	for _, tc := range []struct {
		to        string
		step      string
		code      int
		delivered int
		result    string
	}{
		{"bounce+x@example.com", "rcpt", 550, 0, "fault-smtp-bounce"},
		{"defer+x@example.com", "rcpt", 451, 0, "fault-smtp-defer"},
		{"reject+x@example.com", "dot", 554, 0, "fault-smtp-5xx"},
		{"tempfail+x@example.com", "dot", 451, 0, "fault-smtp-4xx"},
		{"drop+x@example.com", "dot", 0, 1, "delivered"},
		{"Ada+x@example.com", "", 0, 1, "delivered"},
	} {
		t.Run(tc.to, func(t *testing.T) {
			s, _, addr := smtpSim(t, cfgWith(nil), sim.SMTPConfig{})
			step, err := sendRaw(addr, nil, tc.to)
			if step != tc.step || code(err) != tc.code {
				t.Errorf("failed at %q with %v (code %d), want %q code %d", step, err, code(err), tc.step, tc.code)
			}
			if tc.step == "dot" && tc.code == 0 && err == nil {
				t.Error("drop: the reply to the final dot arrived")
			}
			if n := s.DeliveryCount(); n != tc.delivered {
				t.Errorf("%d deliveries, want %d", n, tc.delivered)
			}
			if c := s.Calls(); len(c) != 1 || c[0].Result != tc.result || c[0].To != tc.to {
				t.Errorf("calls = %+v, want one %s", c, tc.result)
			}
		})
	}
}

func TestSMTPAuth(t *testing.T) {
	cfg := sim.SMTPConfig{Username: "shop", Password: "s3cret"}
	s, _, addr := smtpSim(t, cfgWith(nil), cfg)
	host, _, _ := net.SplitHostPort(addr)
	if step, err := sendRaw(addr, nil, "ada@example.com"); step != "mail" || code(err) != 530 {
		t.Errorf("without AUTH: %s %v, want mail 530", step, err)
	}
	if step, err := sendRaw(addr, smtp.PlainAuth("", "shop", "nope", host), "ada@example.com"); step != "auth" || code(err) != 535 {
		t.Errorf("wrong password: %s %v, want auth 535", step, err)
	}
	if s.DeliveryCount() != 0 || len(s.Calls()) != 0 {
		t.Errorf("refused logins left deliveries %v calls %v", s.Deliveries(), s.Calls())
	}
	if step, err := sendRaw(addr, smtp.PlainAuth("", "shop", "s3cret", host), "ada@example.com"); err != nil {
		t.Errorf("right password: %s %v", step, err)
	}
	if s.DeliveryCount() != 1 {
		t.Errorf("deliveries %v", s.Deliveries())
	}
}

// One seed, one sequence of outcomes; both outcomes of a 0.5 fault occur.
func TestSMTPFaultDrawsFollowTheSeed(t *testing.T) {
	run := func() []string {
		s, _, addr := smtpSim(t, cfgWith(func(c *sim.Config) { c.Seed = 7 }), sim.SMTPConfig{Fault4xx: 0.3, Fault5xx: 0.3})
		for range 20 {
			_, _ = sendRaw(addr, nil, "ada@example.com")
		}
		var out []string
		for _, c := range s.Calls() {
			out = append(out, c.Result)
		}
		return out
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Errorf("one seed, two sequences:\n%v\n%v", a, b)
	}
	for _, want := range []string{"delivered", "fault-smtp-4xx", "fault-smtp-5xx"} {
		if !slices.Contains(a, want) {
			t.Errorf("20 draws of 0.3/0.3 gave no %s: %v", want, a)
		}
	}
}

func TestSMTPConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  sim.SMTPConfig
		want string
	}{
		{sim.SMTPConfig{Fault4xx: -0.1}, "smtp-fault-4xx must be a probability"},
		{sim.SMTPConfig{FaultDrop: 2}, "smtp-fault-drop must be a probability"},
		{sim.SMTPConfig{Fault4xx: 0.6, Fault5xx: 0.6}, "add up to"},
		{sim.SMTPConfig{Password: "x"}, "without a username"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.cfg, err, tc.want)
		}
		if _, err := sim.New(sim.DefaultConfig()).NewSMTPServer(tc.cfg); err == nil {
			t.Errorf("%+v: NewSMTPServer accepted it", tc.cfg)
		}
	}
}

// TestSMTPLatency: the Sim's latency holds a mail's answer after its
// final "."; a client that hangs up meanwhile gets nothing delivered.
func TestSMTPLatency(t *testing.T) {
	s, _, addr := smtpSim(t, cfgWith(func(c *sim.Config) { c.Latency = 300 * time.Millisecond }), sim.SMTPConfig{})
	start := time.Now()
	if step, err := sendRaw(addr, nil, "ada@example.com"); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("answered after %s, within the latency", d)
	}
	if n := len(s.Deliveries()); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}

	// A client that writes the "." and hangs up before the answer.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	for _, line := range []string{"", "HELO client\r\n", "MAIL FROM:<orders@example.com>\r\n", "RCPT TO:<bob@example.com>\r\n", "DATA\r\n"} {
		if line != "" {
			if _, err := conn.Write([]byte(line)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Write([]byte(rawMail + ".\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	time.Sleep(600 * time.Millisecond)
	if n := len(s.Deliveries()); n != 1 {
		t.Errorf("%d deliveries after a client hung up during the latency, want still 1", n)
	}
}
