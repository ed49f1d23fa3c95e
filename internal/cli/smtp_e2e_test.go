package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/http"
	"net/mail"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/state"
)

// serveSimSMTP starts `msgq sim serve --smtp-addr` as its own process and
// returns its HTTP URL and its SMTP port.
func serveSimSMTP(t *testing.T, args ...string) (base, smtpPort string) {
	t.Helper()
	cmd := exec.Command("msgq", append([]string{"sim", "serve", "--addr", "127.0.0.1:0", "--smtp-addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("sim serve: %v", err)
	}
	m := regexp.MustCompile(`^sim: listening on (http://\S+) and smtp://127\.0\.0\.1:(\d+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("sim serve printed %q", line)
	}
	return m[1], m[2]
}

// simMails is what the simulator's SMTP server received, raw.
func simMails(t *testing.T, base string) []struct {
	To  []string
	Raw []byte
} {
	t.Helper()
	resp, err := http.Get(base + "/sim/smtp/mails")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ms []struct {
		To  []string
		Raw []byte
	}
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// writeMailTemplates writes an order_ready template (English, with an HTML
// part; two parameters) into a new directory and returns it.
func writeMailTemplates(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "order_ready.en.txt"), "Subject: Order {{2}} is ready ✓\n\nHello {{1}},\nyour order {{2}} is ready for pickup.\n")
	writeFile(t, filepath.Join(dir, "order_ready.en.html"), "<p>Hello {{1}},</p><p>your order <b>{{2}}</b> is ready.</p>\n")
	return dir
}

// readMail parses a raw message as a mail reader would: net/mail for the
// headers, mime/multipart for the alternatives. It returns the decoded
// subject and each part's body by its media type.
func readMail(t *testing.T, raw []byte) (*mail.Message, string, map[string]string) {
	t.Helper()
	m, err := mail.ReadMessage(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("net/mail cannot read the message: %v\n%s", err, raw)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	parts := map[string]string{}
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(mt, "multipart/") {
		b, err := io.ReadAll(qpReader(m.Header.Get("Content-Transfer-Encoding"), m.Body))
		if err != nil {
			t.Fatal(err)
		}
		parts[mt] = string(b)
		return m, subject, parts
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := mr.NextPart() // decodes quoted-printable itself
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		parts[pt] = string(b)
	}
	return m, subject, parts
}

// TestAnSMTPIdentitySendsEmailThroughTheSimulator: an identity of provider
// smtp sends through the simulator's SMTP server (a process of its own,
// real SMTP over TCP) on both stores. A --subject/--text send and a
// template send (rendered at enqueue from the identity's templates) each
// reach their mailbox exactly once, with their subject; the template's
// mail reads, through net/mail and mime/multipart, as the template says.
// A 5xx at RCPT TO fails the row as permanent with the reply kept
// verbatim; a 4xx leaves it queued for later; a reply lost after the
// final "." makes it unknown, listed by stuck, and the next drain sends
// nothing again. Bad input is one line, exit 2, and writes nothing.
func TestAnSMTPIdentitySendsEmailThroughTheSimulator(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		base, port := serveSimSMTP(t)
		dir := writeMailTemplates(t)
		cfg := fmt.Sprintf(`identities:
  mail:
    provider: smtp
    host: 127.0.0.1
    port: %s
    from: "Shop <orders@example.com>"
    tls: none     # the simulator's SMTP server speaks plain SMTP
    templates: %s
    retry: {base: 1h, cap: 2h}
  shop: {provider: sim}
`, port, dir)
		e := newOpEnv(t, kind, cfg)
		ctx := context.Background()

		// Bad input first: nothing of it is written.
		e.refused(2, `^msgq: subject: is for email only \(channel whatsapp has no subject\)\n$`,
			"send", "--key", "w1", "--identity", "shop", "--to", "+15551234567", "--text", "hi", "--subject", "Hi")
		e.refused(2, `^msgq: subject: is required for an email with text \(--subject\)\n$`,
			"send", "--key", "m0", "--identity", "mail", "--to", "ada@example.com", "--text", "hi")
		e.refused(2, `^msgq: template: no such email template "order_shipped" in `,
			"send", "--key", "m0", "--identity", "mail", "--to", "ada@example.com", "--template", "order_shipped")
		e.refused(2, `^msgq: template: wrong number of template parameters: email template order_ready\.en takes 2 parameter\(s\), got 1\n$`,
			"send", "--key", "m0", "--identity", "mail", "--to", "ada@example.com", "--template", "order_ready", "--param", "Ada")
		e.refused(2, `^msgq: template: no such email template "order_ready" in language "fr" in .* \(it has en\)\n$`,
			"send", "--key", "m0", "--identity", "mail", "--to", "ada@example.com", "--template", "order_ready", "--lang", "fr", "--param", "Ada", "--param", "1001")
		e.refused(2, `^msgq: subject: cannot be combined with a template: email template order_ready has its own\n$`,
			"send", "--key", "m0", "--identity", "mail", "--to", "ada@example.com", "--template", "order_ready", "--param", "Ada", "--param", "1001", "--subject", "x")
		e.refused(2, `^msgq: invalid email address "not-an-address": missing '@' or angle-addr\n$`,
			"send", "--key", "m0", "--identity", "mail", "--to", "not-an-address", "--subject", "Hi", "--text", "hi")
		if rs := e.rows(); len(rs) != 0 {
			t.Fatalf("bad input wrote %d rows", len(rs))
		}

		e.run("send", "--key", "welcome-ada", "--identity", "mail", "--to", "Ada@Example.com", "--subject", "Welcome, Ada", "--text", "Hello Ada,\nwelcome.\n")
		e.run("send", "--key", "ready-1001", "--identity", "mail", "--to", "bob@example.com", "--template", "order_ready", "--param", "Bob", "--param", "1001")
		e.run("send", "--key", "bounce", "--identity", "mail", "--to", "bounce+x@example.com", "--subject", "S", "--text", "t")
		e.run("send", "--key", "defer", "--identity", "mail", "--to", "defer+x@example.com", "--subject", "S", "--text", "t")
		e.run("send", "--key", "drop", "--identity", "mail", "--to", "drop+x@example.com", "--subject", "Dropped", "--text", "t")
		// A replay renders the same content: the same row, nothing new.
		if out := e.run("send", "--key", "ready-1001", "--identity", "mail", "--to", "bob@example.com", "--template", "order_ready", "--param", "Bob", "--param", "1001"); !strings.Contains(out, "replayed") {
			t.Errorf("the repeated template send: %q, want replayed", out)
		}
		tpl := e.get("ready-1001")
		if p := tpl.Payload; tpl.Channel != "email" || p.Template != "" || p.Subject != "Order 1001 is ready ✓" ||
			p.Text != "Hello Bob,\nyour order 1001 is ready for pickup.\n" || !strings.Contains(p.HTML, "<b>1001</b>") {
			t.Errorf("the template row stores %s %+v, want the rendered email", tpl.Channel, p)
		}
		if show := e.run("show", "welcome-ada"); !strings.Contains(show, `subject "Welcome, Ada", text "Hello Ada,\nwelcome.\n"`) {
			t.Errorf("show does not show the subject:\n%s", show)
		}
		if show := e.run("show", "ready-1001"); !strings.Contains(show, `subject "Order 1001 is ready ✓", text`) || !strings.Contains(show, "(and an HTML part)") {
			t.Errorf("show of the template row:\n%s", show)
		}

		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		for _, key := range []string{"welcome-ada", "ready-1001"} {
			m := e.get(key)
			if m.State != state.Sent || m.ProviderID != "msgq."+m.ID+"@example.com" || m.Attempts != 1 {
				t.Errorf("%s: %s, provider id %q, %d attempts; want sent with its Message-ID after 1", key, m.State, m.ProviderID, m.Attempts)
			}
		}
		b := e.get("bounce")
		atts, err := e.st.MessageAttempts(ctx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if b.State != state.Failed || b.Reason != state.Permanent || !strings.Contains(b.LastError, "550 5.1.1 No such user here") ||
			len(atts) != 1 || atts[0].ProviderCode != "550" || atts[0].ProviderSubcode != "5.1.1" {
			t.Errorf("bounce: %s(%s) %q, attempts %+v; want failed(permanent) with 550 5.1.1 kept", b.State, b.Reason, b.LastError, atts)
		}
		// A 4xx is transient: the row goes back to the queue for a later
		// attempt (when is the backoff's full jitter, not asserted here).
		d := e.get("defer")
		datts, err := e.st.MessageAttempts(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != state.Queued || d.Attempts != 1 || !strings.Contains(d.LastError, "451 4.7.1 Greylisted") ||
			len(datts) != 1 || datts[0].Class != "transient" || datts[0].ProviderCode != "451" || datts[0].ProviderSubcode != "4.7.1" {
			t.Errorf("defer: %s after %d attempts, %q, attempts %+v; want queued again after one transient 451 4.7.1", d.State, d.Attempts, d.LastError, datts)
		}
		dr := e.get("drop")
		if dr.State != state.Unknown {
			t.Errorf("drop: %s %q, want unknown", dr.State, dr.LastError)
		}
		var stuck []stuckJSON
		e.jsonOut(0, &stuck, "stuck", "--older-than", "0s")
		if keys := stuckKeys(stuck); len(keys) != 1 || keys[0] != "drop" {
			t.Errorf("stuck lists %v, want the dropped mail alone", keys)
		}

		// The next drain never sends the unknown row again (and the
		// deferred one, if it is due by then, is deferred again).
		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("second drain: exit %d: %s", code, errs)
		}
		if m := e.get("drop"); m.State != state.Unknown || m.Attempts != 1 {
			t.Errorf("the second drain touched the unknown row: %s after %d attempts", m.State, m.Attempts)
		}
		if m := e.get("defer"); m.State != state.Queued {
			t.Errorf("the deferred row is %s, want still queued", m.State)
		}
		got := map[string][]delivery{}
		for _, d := range deliveries(t, base) {
			got[d.To] = append(got[d.To], d)
			if d.API != "smtp" || d.Channel != "email" {
				t.Errorf("delivery %+v: want api smtp, channel email", d)
			}
		}
		// The local part as given, the domain in lower case (internal/recipient).
		want := map[string]string{"Ada@example.com": "Welcome, Ada", "bob@example.com": "Order 1001 is ready ✓", "drop+x@example.com": "Dropped"}
		if len(got) != len(want) {
			t.Errorf("deliveries to %v, want to %v", got, want)
		}
		for to, subject := range want {
			if ds := got[to]; len(ds) != 1 || ds[0].Subject != subject {
				t.Errorf("deliveries to %s: %+v, want one with subject %q", to, ds, subject)
			}
		}

		if out := e.run("identities"); !regexp.MustCompile(`(?m)^mail +smtp +email +off +off +1 +0 +1 +no +yes `).MatchString(out) {
			t.Errorf("identities does not show the smtp identity sending email here, the deferred row queued, the dropped one unknown:\n%s", out)
		}
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		writeFile(t, bad, "identities:\n  mail: {provider: smtp, host: 127.0.0.1, from: orders@example.com, tls: ssl}\n")
		e.refused(2, `^msgq: config: identity mail: provider smtp: tls must be starttls, implicit or none \(got "ssl"\)\n$`, "identities", "--config", bad)

		// The template's mail as received, read as a mail reader would.
		for _, m := range simMails(t, base) {
			if len(m.To) != 1 || m.To[0] != "bob@example.com" {
				continue
			}
			msg, subject, parts := readMail(t, m.Raw)
			if subject != "Order 1001 is ready ✓" || msg.Header.Get("Message-Id") != "<msgq."+tpl.ID+"@example.com>" {
				t.Errorf("subject %q, Message-ID %q", subject, msg.Header.Get("Message-Id"))
			}
			if from, _ := msg.Header.AddressList("From"); len(from) != 1 || from[0].Address != "orders@example.com" || from[0].Name != "Shop" {
				t.Errorf("From %v", from)
			}
			if parts["text/plain"] != "Hello Bob,\r\nyour order 1001 is ready for pickup.\r\n" && parts["text/plain"] != "Hello Bob,\nyour order 1001 is ready for pickup.\n" {
				t.Errorf("text part %q", parts["text/plain"])
			}
			if !strings.Contains(parts["text/html"], "your order <b>1001</b> is ready.") {
				t.Errorf("HTML part %q", parts["text/html"])
			}
		}
	})
}

// qpReader decodes a single-part body's transfer encoding.
func qpReader(enc string, r io.Reader) io.Reader {
	if strings.EqualFold(strings.TrimSpace(enc), "quoted-printable") {
		return quotedprintable.NewReader(r)
	}
	return r
}

// TestSendFileCarriesAnEmailsSubjectAndTemplate: JSON lines of send --file
// take "subject" beside "text", and a template line is rendered from the
// identity's templates as a single send is; a line with a wrong parameter
// count or a subject on WhatsApp is reported by its number and not
// enqueued, while the good lines are.
func TestSendFileCarriesAnEmailsSubjectAndTemplate(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		dir := writeMailTemplates(t)
		e := newOpEnv(t, kind, fmt.Sprintf("identities:\n  mail: {provider: smtp, host: 127.0.0.1, from: orders@example.com, templates: %s}\n  shop: {provider: sim}\n", dir))
		in := filepath.Join(t.TempDir(), "in.jsonl")
		writeFile(t, in, `{"key":"f1","identity":"mail","to":"ada@example.com","subject":"Hi Ada","text":"Hello"}
{"key":"f2","identity":"mail","to":"bob@example.com","template":"order_ready","params":["Bob","7"]}
{"key":"f3","identity":"mail","to":"cy@example.com","template":"order_ready","params":["Cy"]}
{"key":"f4","identity":"shop","to":"+15551234567","subject":"Hi","text":"Hello"}
`)
		stdout, _, code := e.try("send", "--file", in)
		if code != 2 {
			t.Fatalf("send --file: exit %d, want 2 (two bad lines)", code)
		}
		for _, want := range []string{"line 1: enqueued f1", "line 2: enqueued f2",
			"line 3: invalid: template: wrong number of template parameters: email template order_ready.en takes 2 parameter(s), got 1",
			"line 4: invalid: subject: is for email only (channel whatsapp has no subject)"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("send --file printed\n%s\nwant a line %q", stdout, want)
			}
		}
		if p := e.get("f1").Payload; p.Subject != "Hi Ada" || p.Text != "Hello" {
			t.Errorf("f1 stores %+v", p)
		}
		if p := e.get("f2").Payload; p.Subject != "Order 7 is ready ✓" || !strings.Contains(p.HTML, "<b>7</b>") {
			t.Errorf("f2 stores %+v", p)
		}
		if rs := e.rows(); len(rs) != 2 {
			t.Errorf("%d rows, want the two good lines", len(rs))
		}
	})
}
