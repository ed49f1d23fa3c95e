package cli_test

import (
	"bytes"
	"fmt"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/msgq/msgq/internal/provider/smtp/mtatest"
)

// TestKillNineMidEmailDrainThroughARealMTA: drains sending email through a
// real MTA (Debian's exim4, started by .ci/mta-setup, with STARTTLS
// verified against its private CA) are killed with SIGKILL while they
// hold rows mid-send. Afterwards every mail is in the MTA's mailbox at
// most once; a sent row's mail is there exactly once; and every row whose
// fate the kill hid is unknown (reconcile, on its expired lease: SMTP has
// no idempotency key) and listed by stuck, never sent again by the drains
// that follow. One of the mails, read back from the mailbox with net/mail
// and mime/multipart, is the template as rendered at enqueue.
func TestKillNineMidEmailDrainThroughARealMTA(t *testing.T) {
	mta := mtatest.Get(t)
	tlsCfg := "tls: none"
	if mta.CAFile != "" {
		tlsCfg = "tls: starttls\n    ca_file: " + mta.CAFile
	}
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		dir := writeMailTemplates(t)
		e := newOpEnv(t, kind, fmt.Sprintf(`identities:
  mail:
    provider: smtp
    host: %s
    port: %d
    from: "Shop <orders@example.com>"
    %s
    templates: %s
    retry: {base: 10ms, cap: 50ms}
`, mta.Host, mta.Port, tlsCfg, dir))
		// The mailbox is shared with every other test and run: this
		// run's recipients are its own.
		run := strings.ToLower(ulid.Make().String())
		const n = 60
		var lines strings.Builder
		for i := range n {
			to := fmt.Sprintf("kill-%s-%02d@%s", run, i, mta.Domain)
			if i%2 == 0 {
				fmt.Fprintf(&lines, `{"key":"k%02d","identity":"mail","to":%q,"template":"order_ready","params":["Ada","%d"]}`+"\n", i, to, i)
			} else {
				fmt.Fprintf(&lines, `{"key":"k%02d","identity":"mail","to":%q,"subject":"Note %d","text":"Hello %d"}`+"\n", i, to, i, i)
			}
		}
		in := filepath.Join(t.TempDir(), "in.jsonl")
		writeFile(t, in, lines.String())
		e.run("send", "--file", in)

		// A short lease, so that reconcile may take over the killed
		// drains' rows within the test.
		killed := 0
		for round := range 3 {
			d := e.cmd("drain", "--follow", "--concurrency", "4", "--lease", "12s", "--call-timeout", "2s")
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if _, mine := sendingBy(t, e.st, d.Process.Pid); mine > 0 {
					break
				}
			}
			// Later in each round, so that some kills land mid-transaction.
			time.Sleep(time.Duration(20*round) * time.Millisecond)
			_, mine := sendingBy(t, e.st, d.Process.Pid)
			if err := d.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = d.Wait()
			if mine > 0 {
				killed++
			}
		}
		if killed == 0 {
			t.Fatal("no drain was killed holding a row: the test proved nothing")
		}
		// The killed drains' leases end; reconcile makes their rows unknown
		// (a bound on waiting, not a timing assertion).
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
			e.run("reconcile")
			if _, s, _ := queueCounts(t, e.st); s == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("rows still sending a minute after their leases ended")
			}
		}
		// Cron drains finish the queue; unknown rows are not theirs.
		for range 20 {
			e.run("drain")
			if q, _, _ := queueCounts(t, e.st); q == 0 {
				break
			}
			time.Sleep(60 * time.Millisecond)
		}

		var stuck []stuckJSON
		e.jsonOut(0, &stuck, "stuck", "--older-than", "0s", "--limit", "1000")
		listed := map[string]bool{}
		for _, s := range stuck {
			listed[s.Key] = true
		}
		rows := e.rows()
		if len(rows) != n {
			t.Fatalf("%d rows, want %d", len(rows), n)
		}
		// The MTA delivers after its 250: wait until every sent row's
		// mail is in the mailbox (a bound, not an assertion).
		var copies map[string][][]byte
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			copies = mboxByMessageID(t, mta.Mailbox)
			missing := 0
			for _, r := range rows {
				if r.State == "sent" && len(copies[r.ID]) == 0 {
					missing++
				}
			}
			if missing == 0 || time.Now().After(deadline) {
				break
			}
		}
		counts := map[string]int{}
		delivered := 0 // unknown rows whose mail did go out before the kill
		var template []byte
		for _, r := range rows {
			counts[r.State]++
			c := len(copies[r.ID])
			if r.State == "unknown" && c == 1 {
				delivered++
			}
			switch {
			case c > 1:
				t.Errorf("%s (%s) is in the mailbox %d times", r.Key, r.State, c)
			case r.State == "sent" && c != 1:
				t.Errorf("%s is sent and in the mailbox %d times", r.Key, c)
			case r.State == "unknown" && !listed[r.Key]:
				t.Errorf("%s is unknown and stuck does not list it", r.Key)
			case r.State != "sent" && r.State != "unknown":
				t.Errorf("%s ended %s (in the mailbox %d times)", r.Key, r.State, c)
			}
			if even := (r.Key[len(r.Key)-1]-'0')%2 == 0; template == nil && even && r.State == "sent" && c == 1 {
				template = copies[r.ID][0] // even lines are the template's
			}
		}
		t.Logf("%d drains killed holding rows: %v; %d of the unknown rows' mails had reached the mailbox", killed, counts, delivered)

		if template == nil {
			t.Fatal("no template mail was sent")
		}
		msg, subject, parts := readMail(t, template)
		if !strings.HasPrefix(subject, "Order ") || !strings.HasSuffix(subject, " is ready ✓") || msg.Header.Get("Received") == "" {
			t.Errorf("subject %q, Received %q: want the template's, through the MTA", subject, msg.Header.Get("Received"))
		}
		if !strings.HasPrefix(strings.ReplaceAll(parts["text/plain"], "\r\n", "\n"), "Hello Ada,\nyour order ") || !strings.Contains(parts["text/html"], "<p>Hello Ada,</p>") {
			t.Errorf("parts %q", parts)
		}
	})
}

// mboxByMessageID reads the mailbox and files each message under the msgq
// id in its Message-ID (<msgq.{id}@domain>); others are left out.
func mboxByMessageID(t *testing.T, path string) map[string][][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]byte{}
	for _, m := range mtatest.SplitMbox(b) {
		msg, err := mail.ReadMessage(bytes.NewReader(m))
		if err != nil {
			continue // not one of ours to judge
		}
		id := strings.Trim(strings.TrimSpace(msg.Header.Get("Message-Id")), "<>")
		if rest, ok := strings.CutPrefix(id, "msgq."); ok {
			ref, _, _ := strings.Cut(rest, "@")
			out[ref] = append(out[ref], m)
		}
	}
	return out
}
