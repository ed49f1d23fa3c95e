// Package mtatest reads the real MTA that .ci/mta-setup starts (Debian's
// exim4) from the environment it prints, for the tests that send through
// it: one reading, so every such test skips, or fails under CI, alike.
package mtatest

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"testing"
)

// MTA is where the real MTA listens and delivers.
type MTA struct {
	Host    string
	Port    int
	Mailbox string // the mbox it delivers Domain's mail to
	Domain  string // the domain it accepts mail for
	CAFile  string // its certificate's CA; "" when it offers no STARTTLS
}

// Get returns the MTA the MSGQ_TEST_MTA_* variables describe. Without
// them the test is skipped, except under CI=true, where that is a failure:
// CI must run what it claims to.
func Get(t *testing.T) MTA {
	t.Helper()
	addr := os.Getenv("MSGQ_TEST_MTA_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(`CI=true and MSGQ_TEST_MTA_ADDR is not set: run eval "$(bash .ci/mta-setup)" before the tests`)
		}
		t.Skip(`MSGQ_TEST_MTA_ADDR is not set (eval "$(bash .ci/mta-setup)" starts a real MTA)`)
	}
	m := MTA{Mailbox: os.Getenv("MSGQ_TEST_MTA_MAILBOX"), Domain: os.Getenv("MSGQ_TEST_MTA_DOMAIN"), CAFile: os.Getenv("MSGQ_TEST_MTA_CAFILE")}
	if m.Mailbox == "" {
		t.Fatal("MSGQ_TEST_MTA_ADDR is set without MSGQ_TEST_MTA_MAILBOX")
	}
	if m.Domain == "" {
		m.Domain = "msgq-test.example"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("MSGQ_TEST_MTA_ADDR %q: %v", addr, err)
	}
	m.Host = host
	if m.Port, err = strconv.Atoi(port); err != nil {
		t.Fatalf("MSGQ_TEST_MTA_ADDR %q: %v", addr, err)
	}
	return m
}

// SplitMbox splits an mbox file into its messages, without their "From "
// separator lines; mboxrd quoting (">From ") inside a body is undone.
func SplitMbox(b []byte) [][]byte {
	var out [][]byte
	var cur *bytes.Buffer
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("From ")) {
			if cur != nil {
				out = append(out, cur.Bytes())
			}
			cur = new(bytes.Buffer)
			continue
		}
		if cur == nil {
			continue
		}
		if q := bytes.TrimLeft(line, ">"); len(q) < len(line) && bytes.HasPrefix(q, []byte("From ")) {
			line = line[1:]
		}
		cur.Write(line)
	}
	if cur != nil {
		out = append(out, cur.Bytes())
	}
	return out
}
