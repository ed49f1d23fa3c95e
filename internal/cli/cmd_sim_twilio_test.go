package cli_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/cli"
	"github.com/msgq/msgq/internal/provider/twilio"
)

// TestSimServeTwilioFlagErrors: bad Twilio flags are one usage line, exit
// 2, and the token is never echoed. (Not parallel: t.Setenv.)
func TestSimServeTwilioFlagErrors(t *testing.T) {
	t.Setenv("MSGQ_TEST_SIM_TWILIO_TOKEN", "topsecret")
	t.Setenv("MSGQ_TEST_SIM_EMPTY", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--twilio-token-env", "MSGQ_TEST_SIM_EMPTY"}, "--twilio-token-env: environment variable MSGQ_TEST_SIM_EMPTY is not set"},
		{[]string{"--twilio-inbound-url", "http://127.0.0.1:8080/webhooks/twilio"}, "--twilio-inbound-url needs --twilio-token-env"},
		{[]string{"--twilio-token-env", "MSGQ_TEST_SIM_TWILIO_TOKEN", "--twilio-inbound-url", "ftp://u:topsecret@h"}, "--twilio-inbound-url must be an http:// or https:// URL"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var stdout, stderr syncBuffer
		code := cli.Run(ctx, append([]string{"sim", "serve", "--addr", "127.0.0.1:0"}, tc.args...),
			&cli.IOStreams{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
		cancel()
		got := stderr.String()
		if code != 2 || !strings.HasPrefix(got, "msgq: ") || !strings.Contains(got, tc.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, got, tc.want)
		}
		if strings.Contains(got, "topsecret") {
			t.Errorf("%v: stderr shows a secret: %q", tc.args, got)
		}
	}
}

// TestSimServeTwilio: the Twilio flags reach the simulator: a send's
// status callbacks and an injected inbound message are signed with the
// token from the environment. (Not parallel: t.Setenv.)
func TestSimServeTwilio(t *testing.T) {
	const token = "sim-cli-twilio-token"
	t.Setenv("MSGQ_TEST_SIM_TWILIO_TOKEN", token)
	got := make(chan url.Values, 8)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f, _ := url.ParseQuery(string(b))
		if !twilio.ValidSignature("http://"+r.Host+r.URL.RequestURI(), f, token, r.Header.Get(twilio.SignatureHeader)) {
			t.Errorf("unsigned post to %s", r.URL.Path)
		}
		got <- f
	}))
	defer rcv.Close()
	base, stop, code, stderr := startSim(t, "--twilio-token-env", "MSGQ_TEST_SIM_TWILIO_TOKEN",
		"--twilio-inbound-url", rcv.URL+"/webhooks/twilio", "--status-delay", "10ms")

	form := url.Values{"To": {"+15551234567"}, "From": {"+15550000000"}, "Body": {"hi"},
		"StatusCallback": {rcv.URL + "/webhooks/twilio?msgq_id=R1"}}
	req, _ := http.NewRequest("POST", base+"/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages.json", strings.NewReader(form.Encode()))
	req.SetBasicAuth("AC0123456789abcdef0123456789abcdef", "x")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("send: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Post(base+"/sim/twilio/inbound", "application/json",
		strings.NewReader(`{"from":"+15551234567","to":"+15550000000","body":"STOP"}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("inject: %v %v", err, resp)
	}
	resp.Body.Close()
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case f := <-got:
			seen[f.Get("MessageStatus")+f.Get("SmsStatus")] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("posts seen %v, want sent, delivered and an inbound message", seen)
		}
	}
	if !seen["sentsent"] || !seen["delivereddelivered"] || !seen["received"] {
		t.Errorf("posts seen %v", seen)
	}
	stop()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d: %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim serve did not stop")
	}
	out := stderr.String()
	if !strings.HasSuffix(out, "\nsim: webhooks: 2 sent, 0 retried, 0 failed, 0 dropped\n") {
		t.Errorf("stderr %q, want the listening line and the callbacks counted", out)
	}
	if strings.Contains(out, token) {
		t.Error("stderr shows the token")
	}
}
