package cli_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgq/msgq/internal/state"
)

// TestATwilioIdentitySendsSMSThroughTheSimulator: an identity of provider
// twilio sends SMS through the Twilio Messages API (the simulator's, over
// real HTTP, in its own process), with the credentials from the
// environment; each row ends sent with Twilio's SM... sid, each text
// reaches its phone once, and a template (which plain SMS cannot carry) is
// refused before any call. A misconfigured identity is bad input.
func TestATwilioIdentitySendsSMSThroughTheSimulator(t *testing.T) {
	t.Parallel()
	bothStores(t, func(t *testing.T, kind string) {
		sim := serveSim(t)
		cfg := fmt.Sprintf("identities:\n  sms-us: {provider: twilio, base_url: %[1]s, account_sid_env: MSGQ_TEST_TWILIO_SID, auth_token_env: MSGQ_TEST_TWILIO_TOKEN, from: \"+15005550006\"}\n"+
			"  sms-key: {provider: twilio, base_url: %[1]s, account_sid_env: MSGQ_TEST_TWILIO_SID, api_key_sid_env: MSGQ_TEST_TWILIO_KEY, api_key_secret_env: MSGQ_TEST_TWILIO_SECRET, from: \"+15005550007\"}\n", sim)
		e := newOpEnv(t, kind, cfg)
		e.env = append(e.env, "MSGQ_TEST_TWILIO_SID=AC"+strings.Repeat("0a", 16), "MSGQ_TEST_TWILIO_TOKEN=test-token",
			"MSGQ_TEST_TWILIO_KEY=SK"+strings.Repeat("0b", 16), "MSGQ_TEST_TWILIO_SECRET=key-secret")
		e.run("send", "--key", "otp-1", "--identity", "sms-us", "--to", "+15551234567", "--text", "Your code is 123456")
		// sms-key authenticates with an API key (SK...) instead of the auth token.
		e.run("send", "--key", "otp-2", "--identity", "sms-key", "--to", "+15551234568", "--text", "Your code is 654321")
		e.run("send", "--key", "tpl-1", "--identity", "sms-us", "--to", "+15551234569", "--template", "order_update", "--param", "1")
		if got := e.get("otp-1").Channel; got != "sms" {
			t.Errorf("channel %s, want the identity's sms", got)
		}
		if _, errs, code := e.try("drain"); code != 0 {
			t.Fatalf("drain: exit %d: %s", code, errs)
		}
		for _, key := range []string{"otp-1", "otp-2"} {
			m := e.get(key)
			if m.State != state.Sent || !strings.HasPrefix(m.ProviderID, "SM") || m.Attempts != 1 {
				t.Errorf("%s: %s, provider id %q, %d attempts; want sent with an SM sid after 1", key, m.State, m.ProviderID, m.Attempts)
			}
		}
		if m := e.get("tpl-1"); m.State != state.Failed || m.Reason != state.Permanent {
			t.Errorf("template row: %s(%s) %q, want failed(permanent)", m.State, m.Reason, m.LastError)
		}
		ds := deliveries(t, sim)
		got := map[string]int{}
		for _, d := range ds {
			got[d.To]++
		}
		if len(ds) != 2 || got["+15551234567"] != 1 || got["+15551234568"] != 1 {
			t.Errorf("deliveries %+v, want one to each texted phone", ds)
		}

		bad := fmt.Sprintf("identities:\n  sms-us: {provider: twilio, base_url: %s, account_sid_env: A, auth_token_env: B}\n", sim)
		badFile := filepath.Join(t.TempDir(), "bad.yaml")
		writeFile(t, badFile, bad)
		e.refused(2, `^msgq: config: identity sms-us: provider twilio needs exactly one of from and messaging_service_sid\n$`, "identities", "--config", badFile)
	})
}
