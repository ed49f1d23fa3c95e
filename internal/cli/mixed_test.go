package cli_test

import (
	"fmt"
	"strings"
	"testing"
)

// A mixed queue holds rows of every kind in one store, all sent through
// one `msgq sim serve --smtp-addr` process, so that one run of an
// exactly-once or crash test covers every provider (issue 15) without a
// subtest per provider. The identities:
//
//	wa    WhatsApp Cloud API (no idempotency key)
//	tw    Twilio Messages API, SMS (no idempotency key); its
//	      status_callback names msgq's row id, which the simulator records
//	      as each delivery's and call's ref (it posts no callbacks: no
//	      token is given it to sign them with)
//	mail  SMTP, email (no idempotency key)
//	web   the generic http API (deduplicates by Idempotency-Key)
//
// The simulator records every kind's row id as the ref of its calls and
// deliveries, so the tests' oracles need no per-kind code. Recipients are
// distinct across kinds: a phone's block of numbers is its identity's.

// mixedEnvVars are the credentials every mixed identity reads.
var mixedEnvVars = []string{"MSGQ_TEST_TOKEN=test-token", "MSGQ_TEST_TWILIO_SID=AC" + strings.Repeat("0a", 16)}

// mixedIdentities is the YAML of the named identities (of wa, tw, mail,
// web) through the simulator at base and its SMTP server at smtpPort,
// each followed by the lines of extra (indented by four spaces, as
// identity settings).
func mixedIdentities(base, smtpPort, extra string, names ...string) string {
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "  %s:\n", name)
		switch name {
		case "wa":
			fmt.Fprintf(&b, "    provider: whatsapp\n    base_url: %s\n    phone_number_id: \"1000001\"\n    token_env: MSGQ_TEST_TOKEN\n", base)
		case "tw":
			fmt.Fprintf(&b, "    provider: twilio\n    base_url: %s\n    account_sid_env: MSGQ_TEST_TWILIO_SID\n    auth_token_env: MSGQ_TEST_TOKEN\n"+
				"    from: \"+15005550006\"\n    status_callback: http://127.0.0.1:9/webhooks/twilio/tw\n", base)
		case "mail":
			fmt.Fprintf(&b, "    provider: smtp\n    host: 127.0.0.1\n    port: %s\n    from: \"Shop <orders@example.com>\"\n    tls: none\n", smtpPort)
		case "web":
			fmt.Fprintf(&b, "    provider: http\n    base_url: %s\n    token_env: MSGQ_TEST_TOKEN\n", base)
		default:
			panic("mixedIdentities: no identity " + name)
		}
		b.WriteString(extra)
	}
	return b.String()
}

// mixedTo is recipient r of identity name: an address for mail, else a
// phone in the identity's own block of numbers.
func mixedTo(name string, r int) string {
	switch name {
	case "mail":
		return fmt.Sprintf("user%07d@example.com", r)
	case "tw":
		return fmt.Sprintf("+15552%06d", r)
	case "web":
		return fmt.Sprintf("+15553%06d", r)
	}
	return fmt.Sprintf("+15551%06d", r)
}

// mixedLine is a send --file line: key for recipient r of identity name,
// with a text (and a subject for mail).
func mixedLine(key, name string, r int, text string) string {
	subject := ""
	if name == "mail" {
		subject = `,"subject":"Your order"`
	}
	return fmt.Sprintf(`{"key":%q,"identity":%q,"to":%q,"text":%q%s}`+"\n", key, name, mixedTo(name, r), text, subject)
}

// checkAtMostOnce is the oracle of a mixed queue's crash test, read from
// the simulator at base and the store of e once the drains are done: no
// message and no recipient reached twice, a delivery over each of apis,
// each of the n rows sent (and delivered exactly once) or still uncertain
// and visible (unknown, sending: msgq stuck lists it for a person). It
// returns the rows' states counted, the deliveries per ref and per API.
func checkAtMostOnce(t *testing.T, e *msgqEnv, base string, n int, apis ...string) (counts, perRef, perAPI map[string]int) {
	t.Helper()
	perRef, perTo, perAPI := map[string]int{}, map[string]int{}, map[string]int{}
	for _, d := range deliveries(t, base) {
		perRef[d.Ref]++
		perTo[d.To]++
		perAPI[d.API]++
		if perRef[d.Ref] == 2 {
			t.Errorf("message %s reached the phone twice", d.Ref)
		}
		if perTo[d.To] == 2 {
			t.Errorf("%s (%s) was reached twice", d.To, d.API)
		}
	}
	for _, api := range apis {
		if perAPI[api] == 0 {
			t.Errorf("no delivery over the %s API: deliveries per API %v", api, perAPI)
		}
	}
	counts = map[string]int{}
	rows := e.rows()
	for _, r := range rows {
		counts[r.State]++
		switch r.State {
		case "sent":
			if perRef[r.ID] != 1 {
				t.Errorf("%s is sent but reached the phone %d times", r.Key, perRef[r.ID])
			}
		case "unknown", "sending":
			// Uncertain and visible: an operator decides (msgq stuck).
		default:
			t.Errorf("%s ended %s (delivered %d times)", r.Key, r.State, perRef[r.ID])
		}
	}
	if len(rows) != n {
		t.Errorf("%d rows, want %d", len(rows), n)
	}
	return counts, perRef, perAPI
}
