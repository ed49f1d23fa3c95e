package smtp_test

import (
	"bytes"
	"context"
	"mime"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/msgq/msgq/internal/provider/smtp"
	"github.com/msgq/msgq/internal/provider/smtp/mtatest"
	"github.com/msgq/msgq/internal/retry"
)

// TestRealMTA sends through a real MTA (Debian's exim4, started by
// .ci/mta-setup) and reads the mailbox it delivered to: the mail arrives
// once, whole, and names its msgq row. With MSGQ_TEST_MTA_CAFILE the send
// is the production default, STARTTLS verified against that CA.
func TestRealMTA(t *testing.T) {
	mta := mtatest.Get(t)
	c := client(t, mta.Host, mta.Port, func(c *smtp.Config) {
		c.Now = time.Now
		if mta.CAFile != "" {
			c.TLS, c.CAFile = smtp.TLSStartTLS, mta.CAFile
		}
	})

	id := ulid.Make().String()
	to := "mta-" + strings.ToLower(id) + "@" + mta.Domain
	m := msg(id, to)
	m.Payload.Subject = "Commande prête ✓ — " + id
	m.Payload.Text = "Bonjour,\nFrom here on, a line starting with From must survive the mbox.\n.\nA lone dot too.\n"
	m.Payload.HTML = "<p>Bonjour &amp; <b>merci</b></p>"
	res := c.Send(context.Background(), m)
	if res.Class != retry.Accepted {
		t.Fatalf("Send = %+v, want accepted", res)
	}
	wantID := "<msgq." + id + "@example.com>"

	// The MTA delivers after it answered 250; wait for the mailbox to show
	// it (a bound on waiting, not a timing assertion).
	var found [][]byte
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(mta.Mailbox)
		if err != nil {
			t.Fatal(err)
		}
		found = found[:0]
		for _, one := range mtatest.SplitMbox(b) {
			if bytes.Contains(one, []byte("Message-ID: "+wantID)) || bytes.Contains(one, []byte("Message-Id: "+wantID)) {
				found = append(found, one)
			}
		}
		if len(found) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(found) != 1 {
		t.Fatalf("the mailbox %s holds %d messages with Message-ID %s, want exactly 1", mta.Mailbox, len(found), wantID)
	}
	hdr, body := parts(t, found[0])
	h := hdr.Header
	if got := h.Get("Message-Id"); got != wantID {
		t.Errorf("Message-ID %q, want %q", got, wantID)
	}
	if got, err := new(mime.WordDecoder).DecodeHeader(h.Get("Subject")); err != nil || got != m.Payload.Subject {
		t.Errorf("Subject decodes to %q, %v; want %q", got, err, m.Payload.Subject)
	}
	if tos, err := h.AddressList("To"); err != nil || len(tos) != 1 || tos[0].Address != to {
		t.Errorf("To %q -> %v, %v", h.Get("To"), tos, err)
	}
	if got := strings.ReplaceAll(body["text/plain"], "\r\n", "\n"); got != m.Payload.Text {
		t.Errorf("text part %q, want %q", got, m.Payload.Text)
	}
	if got := strings.TrimRight(body["text/html"], "\r\n"); got != m.Payload.HTML {
		t.Errorf("html part %q, want %q", got, m.Payload.HTML)
	}
	if h.Get("Received") == "" {
		t.Error("no Received header: did the mail go through the MTA?")
	}
}
