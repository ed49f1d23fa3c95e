package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider/twilio"
	"github.com/msgq/msgq/internal/state"
	"github.com/msgq/msgq/internal/store"
)

const (
	twToken    = "twilio-e2e-token"
	twSender   = "+15005550006"
	twCustomer = "+15551234567"
)

// twProxy is a reverse proxy in front of webhook serve, as TLS is often
// ended in front of it: Twilio (the simulator) calls the proxy's URL and
// signs that, while serve sees its own host. Its target is set once serve
// listens.
func twProxy(t *testing.T) (*httptest.Server, *atomic.Pointer[url.URL]) {
	var target atomic.Pointer[url.URL]
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target.Load())
	}, ErrorLog: log.New(io.Discard, "", 0)} // serve is stopped at the end on purpose
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv, &target
}

// twPost posts a Twilio-style form to url, signed over signedURL with
// token, and returns the status code.
func twPost(t *testing.T, url, signedURL, token string, f url.Values) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(f.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(twilio.SignatureHeader, twilio.Signature(signedURL, f, token))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// twInject has the simulator receive an SMS from the customer and post it,
// signed, to its inbound URL; it returns what that URL answered.
func twInject(t *testing.T, sim, from, body string) int {
	t.Helper()
	resp, err := http.Post(sim+"/sim/twilio/inbound", "application/json",
		strings.NewReader(fmt.Sprintf(`{"from":%q,"to":%q,"body":%q}`, from, twSender, body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Status int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Status
}

// waitStored waits until the store holds n unprocessed webhook
// deliveries (serve runs with --process=false; the simulator posts its
// status callbacks on its own schedule).
func waitStored(t *testing.T, st store.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := pendingWebhooks(t, st); got >= n {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d deliveries stored, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pendingWebhooks(t *testing.T, st store.Store) int {
	t.Helper()
	evs, err := st.WebhookPending(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// optOutsOf is the current opt-outs, "identity recipient" to source.
func optOutsOf(t *testing.T, e *opEnv) map[string]string {
	t.Helper()
	var outs []store.OptOut
	e.jsonOut(0, &outs, "opt-outs", "list")
	got := map[string]string{}
	for _, o := range outs {
		got[o.Identity+" "+o.Recipient] = o.Source
	}
	return got
}

// TestTwilioWebhooksEndToEnd, on both stores: the simulator serves the
// Twilio API and posts its signed status callbacks through a proxy to
// webhook serve at /webhooks/twilio/<identity> (--public-url the proxy's),
// and webhook process moves the SMS to delivered; the same callback
// redelivered twice applies once. A bad signature, or a signature over
// another URL than the public one, gets 401 and stores nothing. An
// inbound STOP (through the simulator) makes the next send to that number
// fail opted_out with no call reaching the simulator; START lifts it. A
// 21610 answer to a send, and a status callback with ErrorCode 21610,
// record the opt-out.
func TestTwilioWebhooksEndToEnd(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		proxy, target := twProxy(t)
		hook := proxy.URL + "/webhooks/twilio/sms-us"
		identity := func(base string) string {
			// sms-quiet asks for no status callbacks: the simulator's own
			// cannot race the one the test posts for its row.
			return fmt.Sprintf("identities:\n  sms-us: {provider: twilio, base_url: %s, account_sid_env: MSGQ_TEST_TWILIO_SID, "+
				"auth_token_env: MSGQ_TEST_TWILIO_TOKEN, from: %q, status_callback: %s}\n"+
				"  sms-quiet: {provider: twilio, base_url: %[1]s, account_sid_env: MSGQ_TEST_TWILIO_SID, "+
				"auth_token_env: MSGQ_TEST_TWILIO_TOKEN, from: \"+15005550007\"}\n", base, twSender, hook)
		}
		// serve starts before the simulator, whose inbound URL it is:
		// its config's base_url is not used by serve.
		e := newOpEnv(t, kind, identity("http://127.0.0.1:9"))
		e.env = append(e.env, "MSGQ_TEST_TWILIO_SID=AC"+strings.Repeat("0a", 16), "MSGQ_TEST_TWILIO_TOKEN="+twToken)
		srv, serveURL := startServe(t, e.msgqEnv, "--public-url", proxy.URL, "--process=false")
		u, err := url.Parse(serveURL)
		if err != nil {
			t.Fatal(err)
		}
		target.Store(u)
		_, sim := startListener(t, e.msgqEnv, "sim: listening on ", "sim", "serve", "--addr", "127.0.0.1:0",
			"--twilio-token-env", "MSGQ_TEST_TWILIO_TOKEN", "--twilio-inbound-url", hook, "--status-delay", "50ms")
		cfg := filepath.Join(t.TempDir(), "msgq.yaml")
		writeFile(t, cfg, identity(sim))
		e.env = append(e.env, "MSGQ_CONFIG="+cfg)

		// A send, its callbacks (sent, delivered), processed.
		e.run("send", "--key", "otp-1", "--identity", "sms-us", "--to", twCustomer, "--text", "Your code is 123456")
		e.run("drain")
		m := e.get("otp-1")
		if m.State != state.Sent || !strings.HasPrefix(m.ProviderID, "SM") {
			t.Fatalf("after drain: %s, provider id %q; want sent with an SM sid", m.State, m.ProviderID)
		}
		waitStored(t, e.st, 2)
		e.run("webhook", "process")
		if m = e.get("otp-1"); m.State != state.Delivered {
			t.Fatalf("after webhook process: %s, want delivered: %s", m.State, srv.log.String())
		}

		// The delivered callback again, twice: the first is stored and
		// processing finds its status a duplicate; the second is a copy of
		// it (the same URL and form), answered 200 and not stored, its
		// status counted as a duplicate too. Applied once (and once more
		// by replay).
		cb := twilio.CallbackURL(hook, m.ID)
		f := url.Values{"MessageSid": {m.ProviderID}, "MessageStatus": {"delivered"}, "SmsStatus": {"delivered"},
			"AccountSid": {"AC" + strings.Repeat("0a", 16)}, "From": {twSender}, "To": {twCustomer}}
		direct := serveURL + strings.TrimPrefix(cb, proxy.URL)
		var was, now struct {
			Duplicates int `json:"duplicate_webhooks"`
			Replayed   int `json:"replayed_webhooks"`
		}
		e.jsonOut(0, &was, "stats")
		for range 2 {
			if code := twPost(t, cb, cb, twToken, f); code != http.StatusOK {
				t.Fatalf("redelivery: %d", code)
			}
		}
		var sum struct {
			Duplicates int `json:"duplicates"`
			Applied    int `json:"applied"`
		}
		e.jsonOut(0, &sum, "webhook", "process")
		if sum.Duplicates != 1 || sum.Applied != 0 {
			t.Errorf("redeliveries: %+v, want 1 duplicate (the stored one), nothing applied", sum)
		}
		e.jsonOut(0, &now, "stats")
		if now.Duplicates-was.Duplicates != 2 || now.Replayed-was.Replayed != 1 {
			t.Errorf("stats %+v then %+v, want 2 more duplicates, 1 of them a replayed delivery", was, now)
		}
		// A captured callback replayed reads as serve read it: the same
		// status again.
		form := filepath.Join(t.TempDir(), "callback.txt")
		writeFile(t, form, f.Encode())
		e.jsonOut(0, &sum, "webhook", "replay", "--provider", "twilio", "--identity", "sms-us", "--url", cb, form)
		if sum.Duplicates != 1 || sum.Applied != 0 {
			t.Errorf("replay: %+v, want a duplicate, nothing applied", sum)
		}
		e.refused(2, `^msgq: --url is for --provider twilio`, "webhook", "replay", "--provider", "http", "--url", cb, form)
		hist, err := e.st.MessageHistory(context.Background(), m.ID)
		if err != nil {
			t.Fatal(err)
		}
		delivered := 0
		for _, h := range hist {
			if h.Source == store.SourceWebhook && h.To == state.Delivered {
				delivered++
			}
		}
		if delivered != 1 {
			t.Errorf("%d webhook moves to delivered in history, want 1: %+v", delivered, hist)
		}

		// Refused: another token's signature, and the right token's over
		// serve's own URL (not the public one Twilio called).
		before := pendingWebhooks(t, e.st)
		if code := twPost(t, cb, cb, "another-token", f); code != http.StatusUnauthorized {
			t.Errorf("bad signature: %d, want 401", code)
		}
		if code := twPost(t, direct, direct, twToken, f); code != http.StatusUnauthorized {
			t.Errorf("signed over serve's own URL behind --public-url: %d, want 401", code)
		}
		if after := pendingWebhooks(t, e.st); after != before {
			t.Errorf("refused deliveries stored: %d -> %d", before, after)
		}

		// STOP through the simulator: recorded, and the next send fails
		// opted_out with no call.
		if code := twInject(t, sim, twCustomer, "stop"); code != http.StatusOK {
			t.Fatalf("inbound STOP: serve answered %d", code)
		}
		e.run("webhook", "process")
		if got := optOutsOf(t, e); got["sms-us "+twCustomer] != "inbound STOP" {
			t.Fatalf("opt-outs %v, want %s by inbound STOP", got, twCustomer)
		}
		calls := len(deliveries(t, sim))
		e.run("send", "--key", "otp-2", "--identity", "sms-us", "--to", twCustomer, "--text", "Your code is 222222")
		e.run("drain")
		if m := e.get("otp-2"); m.State != state.Failed || m.Reason != state.OptedOut || m.Attempts != 0 {
			t.Errorf("send after STOP: %s(%s) after %d attempts, want failed(opted_out) with no call", m.State, m.Reason, m.Attempts)
		}
		if n := len(deliveries(t, sim)); n != calls {
			t.Errorf("deliveries %d -> %d: a call reached the simulator", calls, n)
		}

		// START lifts it.
		if code := twInject(t, sim, twCustomer, "START"); code != http.StatusOK {
			t.Fatalf("inbound START: serve answered %d", code)
		}
		e.run("webhook", "process")
		if got := optOutsOf(t, e); got["sms-us "+twCustomer] != "" {
			t.Fatalf("opt-outs %v after START, want none for %s", got, twCustomer)
		}
		e.run("send", "--key", "otp-3", "--identity", "sms-us", "--to", twCustomer, "--text", "Your code is 333333")
		e.run("drain")
		if m := e.get("otp-3"); m.State != state.Sent {
			t.Errorf("send after START: %s, want sent", m.State)
		}
		if n := len(deliveries(t, sim)); n != calls+1 {
			t.Errorf("deliveries %d -> %d, want one more", calls, n)
		}

		// A status callback failing with 21610 records the opt-out.
		other := "+15551234568"
		e.run("send", "--key", "otp-4", "--identity", "sms-quiet", "--to", other, "--text", "Your code is 444444")
		e.run("drain")
		m4 := e.get("otp-4")
		cb4 := twilio.CallbackURL(proxy.URL+"/webhooks/twilio/sms-quiet", m4.ID)
		f4 := url.Values{"MessageSid": {m4.ProviderID}, "MessageStatus": {"undelivered"}, "ErrorCode": {"21610"},
			"AccountSid": {"AC" + strings.Repeat("0a", 16)}, "From": {"+15005550007"}, "To": {other}}
		if code := twPost(t, cb4, cb4, twToken, f4); code != http.StatusOK {
			t.Fatalf("21610 callback: %d", code)
		}
		e.run("webhook", "process")
		if got := optOutsOf(t, e); got["sms-quiet "+other] != "twilio 21610" { // the identity whose endpoint received it
			t.Errorf("opt-outs %v, want %s by the 21610 status callback", got, other)
		}
		if m4 = e.get("otp-4"); m4.State != state.Failed {
			t.Errorf("row of the 21610 callback: %s, want failed", m4.State)
		}

		// A 21610 answer: the customer opted out at Twilio while msgq
		// heard nothing (serve is down), and the send is refused.
		_ = srv.proc.Signal(syscall.SIGTERM)
		<-srv.done
		third := "+15551234569"
		twInject(t, sim, third, "STOP")
		e.run("send", "--key", "otp-5", "--identity", "sms-us", "--to", third, "--text", "Your code is 555555")
		e.run("drain")
		if m := e.get("otp-5"); m.State != state.Failed || m.Reason != state.OptedOut || m.Attempts != 1 {
			t.Errorf("send refused with 21610: %s(%s) after %d attempts, want failed(opted_out) after 1", m.State, m.Reason, m.Attempts)
		}
		if got := optOutsOf(t, e); got["sms-us "+third] != "send answer, code 21610" {
			t.Errorf("opt-outs %v, want %s by the send answer", got, third)
		}
	})
}
